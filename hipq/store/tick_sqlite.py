"""SQLite's tick: the statements of ``hipq.store.statements`` through SQLAlchemy.

SQLite serialises writers (BEGIN IMMEDIATE): there are no row locks to take, and a
fence sent with a statement is sent just before it, in the same transaction.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.outcomes import Settlement
from hipq.store import statements as st
from hipq.store.schema import jobs
from hipq.store.tick import DueRead, DueScanOf, Fence, Tick, fence_params, read_due

_CLAIM = st.claim(jobs.c.id.in_(bindparam("b_ids", expanding=True)))
_SETTLE = (
    update(jobs)
    .where(
        *(jobs.c[k] == bindparam(f"b_{k}") for k in st.SETTLE_KEYS),
        st.SETTLE_GUARD.sql(jobs.c.state),
    )
    .values(
        {
            **{c: bindparam(c, type_=jobs.c[c].type) for c in st.SETTLE_COLUMNS},
            **st.SETTLE_RESETS,
            "updated_at": bindparam("b_now", type_=jobs.c.updated_at.type),
        }
    )
)
# A settlement's values of SETTLE_COLUMNS (its state a str enum, stored as its value).
_SETTLED = operator.attrgetter(*st.SETTLE_COLUMNS)


def _epoch(column: Any) -> Any:
    # Our SQLite timestamps are ISO strings in UTC, which julianday() reads.
    return (func.julianday(column) - 2440587.5) * 86400.0


_scans: dict[tuple[str, float | None, bool], tuple[Any, Any]] = {}


def _scan(of: DueScanOf) -> Any:
    """The due scan of ``of``, built once per queue order (but for a label's)."""
    key = (of.order, of.aging, of.max_weight is not None)
    built = _scans.get(key)
    if built is None:
        due = st.due_query(*key, epoch=_epoch(jobs.c.run_at))
        built = _scans[key] = (due, st.due_scan(due))
    due, scan = built
    return scan if of.where is None else st.due_scan(due.where(of.where))


class SqliteTick(Tick):
    def __init__(self, conn: AsyncConnection, attempt_insert: Any) -> None:
        # ``attempt_insert``: ``Dialect.attempt_insert``, which skips a record already
        # stored (the same settlement again, after a lost COMMIT reply).
        self._conn, self._record = conn, attempt_insert

    async def fence(self, fence: Fence) -> Any:
        return (await self._conn.execute(st.FENCE, fence_params(fence))).first()

    async def settle(
        self, settlements: Sequence[Settlement], now: datetime, fence: Fence | None
    ) -> Any:
        row = None
        if fence is not None and (row := await self.fence(fence)) is None:
            return None
        params = [
            {
                "b_id": s.job_id,
                "b_attempt": s.attempt,
                "b_now": now,
                **dict(zip(st.SETTLE_COLUMNS, _SETTLED(s), strict=True)),
            }
            for s in settlements
        ]
        await self._conn.execute(_SETTLE, params)
        records = [
            {c: getattr(r, c) for c in st.ATTEMPT_COLUMNS}
            for s in settlements
            if (r := s.record) is not None
        ]
        if records:
            await self._conn.execute(self._record, records)
        return row

    async def due(self, scan: DueScanOf, fence: Fence | None) -> DueRead:
        return await read_due(self._conn, self, _scan(scan), scan, fence)

    async def next_run_at(self, queue: str, after: datetime) -> datetime | None:
        params = {"b_queue": queue, "b_after": after}
        found: datetime | None = (
            await self._conn.execute(st.NEXT_RUN_AT, params)
        ).scalar_one_or_none()
        return found

    async def claim(self, ids: list[int], now: datetime, deadline: datetime) -> None:
        await self._conn.execute(_CLAIM, {"b_now": now, "b_deadline": deadline, "b_ids": ids})
