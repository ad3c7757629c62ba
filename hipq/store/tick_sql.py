"""PostgreSQL's tick: the statements of ``hipq.store.statements`` compiled once for
asyncpg and sent on the asyncpg connection itself.

Every tick runs the lease fence, the due scan, the claim and the next-due read.
Through SQLAlchemy Core each cost far more Python than the server's work on it
(building the expression, finding its compiled form, the cursor adapter, row
processing); here each is the SQLAlchemy statement compiled once
(``hipq.store.driver.DriverStatement``), which asyncpg keeps prepared per
connection. JSON columns come back decoded (the codec SQLAlchemy set on the
connection), timestamps as aware UTC datetimes, as through SQLAlchemy.

The due scan also reads when the queue's next job falls due after now (claims do
not change that: what they claim was due), and on a wake-up for a new job, whose
tick writes nothing before its due scan, the lease fence travels with it: a
data-modifying WITH, one round trip for both. A fence that matches no row returns
no row, and the tick raises ``LeaseLost`` before it writes anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.outcomes import Settlement
from hipq.store import statements as st
from hipq.store import unnest
from hipq.store.driver import DriverStatement, any_of
from hipq.store.rows import row_to_job
from hipq.store.schema import jobs
from hipq.store.tick import (
    ClaimRead,
    DueRead,
    DueScanOf,
    Fence,
    Tick,
    fence_params,
    read_due,
)

_FENCE = DriverStatement(st.FENCE)
_NEXT_RUN_AT = DriverStatement(st.NEXT_RUN_AT)
_CLAIM = DriverStatement(st.claim(any_of(jobs.c.id, "b_ids")))


def _epoch(column: Any) -> Any:
    return func.extract("epoch", column)


_Scans = tuple[Any, DriverStatement, DriverStatement, DriverStatement]
_scans: dict[tuple[str, float | None, bool], _Scans] = {}


def _scans_of(of: DueScanOf) -> _Scans:
    """The due query of ``of``'s queue order, its due scan without and with the fence,
    and its claim at the scan, compiled once."""
    key = (of.order, of.aging, of.max_weight is not None)
    built = _scans.get(key)
    if built is None:
        due = st.due_query(*key, epoch=_epoch(jobs.c.run_at))
        plain = DriverStatement(st.due_scan(due))
        fenced = DriverStatement(st.due_scan(due, fenced=True))
        claiming = DriverStatement(st.claim_at_scan(due))
        built = _scans[key] = (due, plain, fenced, claiming)
    return built


async def claim_at_scan(driver: Any, scan: DueScanOf, fence: Fence) -> ClaimRead:
    """The fence, the due scan and the claim as one statement on ``driver`` (an asyncpg
    connection outside any transaction: the statement commits on its own)."""
    rows = await _scans_of(scan)[3].fetch_on(driver, {**scan.params(), **fence_params(fence)})
    if not rows:
        return ClaimRead(None, None, 0, [])
    first = rows[0]
    claimed = [row_to_job(r, 4) for r in rows if r[4] is not None]
    return ClaimRead(first, first[2], first[3], claimed)


class PostgresTick(Tick):
    def __init__(self, conn: AsyncConnection, driver: Any) -> None:
        # ``driver``: the asyncpg connection, in ``conn``'s transaction
        # (``hipq.store.asyncpg_adapter.driver_in_transaction``).
        self._conn, self._driver = conn, driver

    async def fence(self, fence: Fence) -> Any:
        rows = await _FENCE.fetch_on(self._driver, fence_params(fence))
        return rows[0] if rows else None

    async def settle(
        self, settlements: Sequence[Settlement], now: datetime, fence: Fence | None
    ) -> Any:
        return await unnest.job_settle(self._driver, settlements, now, fence)

    async def due(self, scan: DueScanOf, fence: Fence | None) -> DueRead:
        due, plain, fenced, _ = _scans_of(scan)
        if scan.where is not None:  # a label's value: a statement of its own each time
            return await read_due(self._conn, self, st.due_scan(due.where(scan.where)), scan, fence)
        params = scan.params()
        if fence is None:
            rows = await plain.fetch_on(self._driver, params)
            queue_row, first = None, 1
        else:
            rows = await fenced.fetch_on(self._driver, {**params, **fence_params(fence)})
            if not rows:
                return DueRead(None, None, [])
            queue_row, first = rows[0], 3
        found = [row_to_job(r, first) for r in rows if r[first] is not None]
        return DueRead(queue_row, rows[0][first - 1], found)

    async def next_run_at(self, queue: str, after: datetime) -> datetime | None:
        rows = await _NEXT_RUN_AT.fetch_on(self._driver, {"b_queue": queue, "b_after": after})
        found: datetime | None = rows[0][0]
        return found

    async def claim(self, ids: list[int], now: datetime, deadline: datetime) -> None:
        params = {"b_now": now, "b_deadline": deadline, "b_ids": ids}
        await _CLAIM.execute_on(self._driver, params)
