"""The one storage seam of hipq: noun-first methods over SQLAlchemy Core.

``Store`` is the sum of one part per table (``jobs``, ``inbox``, ``queues``,
``heartbeats``, ``processes``, ``hand_off``), all sharing one engine and one ``Dialect``
chosen from the URL;
the queue loop's writes go through ``queue_batch`` (``hipq.store.batch``). Callers outside
``hipq.store`` use only these methods, never the engine or the tables.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from hipq.jobs import Attempt, Job
from hipq.lifecycle import TERMINAL
from hipq.store import migrations
from hipq.store.batches import BatchTable
from hipq.store.bulk import BulkTable
from hipq.store.dialects import Dialect, create_engine, dialect_for
from hipq.store.hand_off import HandOffTable
from hipq.store.heartbeats import Heartbeat, HeartbeatTable
from hipq.store.inbox import InboxTable
from hipq.store.job_types_mirror import JobTypesMirror
from hipq.store.jobs import JobTable
from hipq.store.operator import OperatorTable
from hipq.store.operator_reads import OperatorReads
from hipq.store.outbox import NotificationTable
from hipq.store.process_guard import ProcessGuard
from hipq.store.processes import ProcessTable
from hipq.store.pull_claims import PullClaimTable
from hipq.store.queues import QueueTable
from hipq.store.records import NotFound
from hipq.store.schedules import ScheduleTable
from hipq.store.schema import metadata
from hipq.store.view_reads import view_reads_for


class JobView(NamedTuple):
    job: Job
    attempts: list[Attempt]
    heartbeat: Heartbeat | None


class JobViews(NamedTuple):
    """What ``Store.job_views`` read: the views, and the queue of each job of
    ``if_finished`` that is not finished (read as its state and queue alone)."""

    views: list[JobView]
    open_queues: dict[int, str]


class Store(
    JobTable,
    BatchTable,
    OperatorTable,
    BulkTable,
    InboxTable,
    QueueTable,
    JobTypesMirror,
    ScheduleTable,
    HeartbeatTable,
    OperatorReads,
    NotificationTable,
    ProcessTable,
    PullClaimTable,
    HandOffTable,
):
    def __init__(self, engine: AsyncEngine, dialect: Dialect | None = None) -> None:
        super().__init__(engine, dialect or dialect_for(engine.url.render_as_string()))
        self._view_reads = view_reads_for(self.dialect)

    @classmethod
    def from_url(cls, url: str, **engine_kwargs: Any) -> Store:
        dialect = dialect_for(url)
        return cls(create_engine(url, dialect, **engine_kwargs), dialect)

    async def close(self) -> None:
        await self.dialect.close()
        await self.engine.dispose()

    async def job_view(self, job_id: int) -> JobView:
        """A job with its attempts and last heartbeat, read on one connection (what
        ``GET /v1/jobs/{id}`` shows); ``NotFound`` if there is no such job."""
        reads = self._view_reads
        async with self._read() as conn:
            found = await reads.jobs_of(conn, [job_id])
            if not found:
                raise NotFound(f"job {job_id} does not exist", field="id")
            tried = await reads.attempts_of(conn, [job_id])
            beats = await reads.heartbeats_of(conn, [job_id])
        return JobView(found[0], tried.get(job_id, []), beats.get(job_id))

    async def job_views(
        self, job_ids: Sequence[int], *, if_finished: Collection[int] = ()
    ) -> JobViews:
        """``job_view`` of many jobs on one connection, a few statements whatever their
        number (for the waiters of ``GET /v1/jobs/{id}?wait=``), missing jobs left out.
        Those of ``if_finished`` are read first as their state and queue alone, and in
        full only when they are finished: a job still open costs two columns, not its
        row, attempts and heartbeat."""
        reads = self._view_reads
        light = set(if_finished).intersection(job_ids)
        full = [i for i in job_ids if i not in light]
        open_queues: dict[int, str] = {}
        async with self._read() as conn:
            for job_id, state, queue in await reads.states_of(conn, sorted(light)) if light else ():
                if state in TERMINAL:
                    full.append(job_id)
                else:
                    open_queues[job_id] = queue
            found = []
            for job in await reads.jobs_of(conn, full) if full else ():
                # Read committed: a job may have changed between the two statements.
                if job.id in light and job.state not in TERMINAL:
                    open_queues[job.id] = job.queue
                else:
                    found.append(job)
            ids = [j.id for j in found]
            tried = await reads.attempts_of(conn, ids) if ids else {}
            beats = await reads.heartbeats_of(conn, ids) if ids else {}
        views = [JobView(j, tried.get(j.id, []), beats.get(j.id)) for j in found]
        return JobViews(views, open_queues)

    async def check(self) -> None:
        """Refuse a database that would not keep what hipq promises (``StoreSetupError``)."""
        async with self._read() as conn:
            await self.dialect.check(conn)

    async def ping(self) -> None:
        """One round trip to the database; raises if it cannot be reached."""
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def open(self, migrate: bool) -> None:
        """Make the database ready to serve: checked, its schema current (migrated
        when ``migrate``, else ``migrations.SchemaBehind``), and, where the process
        guard proves this process the only one, the leases of a crashed one cleared
        (they would otherwise idle the queues for lease_ttl)."""
        await self.check()
        await migrations.ensure_current(self.engine, migrate)
        if self.dialect.single_process:
            await self.lease_clear_all()
            await self.process_clear_all()

    async def schema_upgrade(self, revision: str = "head") -> str:
        """Apply the migrations up to ``revision``; the revision the database is at."""
        await migrations.upgrade(self.engine, revision)
        return await self.schema_revision() or ""

    async def schema_revision(self) -> str | None:
        return await migrations.current_revision(self.engine)

    async def schema_differences(self) -> list[Any]:
        """How the database's tables differ from those hipq declares; empty if not at all."""
        return await migrations.differences(self.engine)

    async def tables_empty(self) -> None:
        """Delete every row of hipq's tables (tests and benchmarks start from empty)."""
        async with self._write() as conn:
            await self.dialect.tables_empty(conn, metadata.sorted_tables)

    def process_guard(self, database_url: str, on_payload: Callable[[str], None]) -> ProcessGuard:
        """What a serving process holds while it uses this database (see the dialect)."""
        return self.dialect.process_guard(database_url, on_payload)
