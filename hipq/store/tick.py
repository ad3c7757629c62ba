"""The hot statements of a queue's tick, behind one interface with one implementation
per dialect (as River's ``riverdriver``, with ``riverpgxv5`` and ``riversqlite``).

``QueueBatch`` (``hipq.store.batch``) holds a ``Tick`` and never asks which one:
``Dialect.tick`` makes it for the batch's transaction, ``hipq.store.tick_sqlite``'s
through SQLAlchemy, ``hipq.store.tick_sql``'s on the asyncpg connection. Both run
the statements of ``hipq.store.statements``.

The lease fence may travel with the tick's first statement (the settle or the due
scan): ``fence`` is then given, and the answer carries the queue's row (paused,
forbidden flags), or None when the fence matched none and nothing was written.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.jobs import Job
from hipq.outcomes import Settlement
from hipq.store.rows import row_to_job

# The fence not sent yet: (queue, owner, token, new lease expiry).
Fence = tuple[str, str, int, datetime]


@dataclass(frozen=True, slots=True)
class DueRead:
    """What a due scan read: the queue's row if the fence went with it (None if it
    failed), when the next job falls due after now, and the due jobs (none if the
    queue is paused)."""

    queue_row: Any
    next_run_at: datetime | None
    jobs: list[Job]


@dataclass(frozen=True, slots=True)
class ClaimRead:
    """What a claim at the scan did (``hipq.store.statements.claim_at_scan``): the
    queue's row, when the next job falls due after now, how many due jobs it read, and
    those it claimed (none if the queue is paused)."""

    queue_row: Any
    next_run_at: datetime | None
    read: int
    claimed: list[Job]


@dataclass(frozen=True, slots=True)
class DueScanOf:
    """One due scan's terms (``hipq.store.statements.due_query``)."""

    queue: str
    now: datetime
    limit: int
    order: str
    aging: float | None
    max_weight: int | None
    # A further condition on the due jobs (a label's value), or None.
    where: ColumnElement[bool] | None = None

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {
            "b_queue": self.queue,
            "b_now": self.now,
            "b_after": self.now,
            "b_limit": self.limit,
        }
        if self.max_weight is not None:
            params["b_max_weight"] = self.max_weight
        return params


def fence_params(fence: Fence) -> dict[str, Any]:
    queue, owner, token, expires = fence
    return {"b_queue": queue, "b_owner": owner, "b_token": token, "b_expires": expires}


class Tick(ABC):
    """A tick's hot statements inside the batch's transaction."""

    @abstractmethod
    async def fence(self, fence: Fence) -> Any:
        """Send the lease fence alone: the queue's row, None if it failed."""

    @abstractmethod
    async def settle(
        self, settlements: Sequence[Settlement], now: datetime, fence: Fence | None
    ) -> Any:
        """Persist settlements and their attempt records; with ``fence``, the queue's row
        (None: the fence failed and nothing was written)."""

    @abstractmethod
    async def due(self, scan: DueScanOf, fence: Fence | None) -> DueRead:
        """The due jobs, rows locked, and the next due time after ``scan.now``."""

    @abstractmethod
    async def next_run_at(self, queue: str, after: datetime) -> datetime | None:
        """When the queue's next scheduled job falls due after ``after``."""

    @abstractmethod
    async def claim(self, ids: list[int], now: datetime, deadline: datetime) -> None:
        """scheduled -> running for ``ids`` (rows the due scan locked)."""


async def read_due(
    conn: AsyncConnection, tick: Tick, scan: Select[Any], of: DueScanOf, fence: Fence | None
) -> DueRead:
    """A due scan (``hipq.store.statements.due_scan``) through SQLAlchemy, the fence sent
    just before it: a paused queue reads the next due time and no job."""
    queue_row = None
    params = of.params()
    if fence is not None:
        queue_row = await tick.fence(fence)
        if queue_row is None:
            return DueRead(None, None, [])
        if queue_row[0]:
            params["b_limit"] = 0
    rows = (await conn.execute(scan, params)).all()
    found = [row_to_job(r, 1) for r in rows if r[1] is not None]
    return DueRead(queue_row, rows[0][0] if rows else None, found)
