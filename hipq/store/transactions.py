"""The store's engine, its dialect, and the transactions every table's methods use."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hipq.jobs import Job
from hipq.store.dialects import Dialect, budget_seconds, time_budget
from hipq.store.records import Conflict, NotFound
from hipq.store.rows import row_to_job
from hipq.store.schema import jobs
from hipq.store.state_guards import Guard


class Transactions:
    def __init__(self, engine: AsyncEngine, dialect: Dialect) -> None:
        self.engine = engine
        self.dialect = dialect
        # Called after a commit with each wake-up payload it sent (``hipq.store.wakeup``),
        # so that this process's loops hear their news the same way other processes do.
        self.listeners: list[Callable[[str], None]] = []
        self._notices: dict[int, set[str]] = {}  # open write transaction -> payloads

    def _engine(self) -> AsyncEngine:
        """The API's transactions (begun under ``time_budget``) have a pool of their own."""
        return self.engine if budget_seconds() is None else self.dialect.budgeted(self.engine)

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        async with self._engine().connect() as conn:
            await conn.execution_options(hipq_write=True)
            sent: set[str] = set()
            self._notices[id(conn)] = sent
            try:
                async with conn.begin():
                    yield conn
            finally:
                self._notices.pop(id(conn), None)
            for payload in sent:  # committed: tell this process's listeners too
                for listener in self.listeners:
                    listener(payload)

    async def write_check(self, within_seconds: float) -> None:
        """Raise unless a job could be written now: a write transaction on the jobs
        table, begun and rolled back, within ``within_seconds`` (connecting included)."""
        async with asyncio.timeout(within_seconds):
            with time_budget(within_seconds):
                async with self._engine().connect() as conn:
                    await conn.execution_options(hipq_write=True)
                    async with conn.begin() as transaction:
                        await self.dialect.write_probe(conn)
                        await transaction.rollback()

    async def _notify(self, conn: AsyncConnection, payloads: set[str]) -> None:
        """NOTIFY other processes, and this one's listeners once the transaction commits."""
        pending = self._notices.get(id(conn))
        if pending is not None:
            pending.update(payloads)
        await self.dialect.notify(conn, payloads)

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self._engine().connect() as conn:
            if self.dialect.reads_autocommit:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
            async with conn.begin():
                yield conn

    async def _job_locked(self, conn: AsyncConnection, job_id: int) -> Job:
        query = self.dialect.for_update(select(jobs).where(jobs.c.id == job_id))
        row = (await conn.execute(query)).first()
        if row is None:
            raise NotFound(f"job {job_id} does not exist", field="id")
        return row_to_job(row)

    async def _job_update_guarded(
        self, conn: AsyncConnection, job_id: int, guard: Guard, values: dict[str, Any]
    ) -> Job:
        stmt = (
            update(jobs)
            .where(jobs.c.id == job_id, guard.sql(jobs.c.state))
            .values(**values)
            .returning(*jobs.c)
        )
        row = (await conn.execute(stmt)).first()
        if row is None:
            raise Conflict(f"job {job_id} changed state meanwhile; try again")
        return row_to_job(row)
