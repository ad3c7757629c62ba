"""The reads behind a job's view (``GET /v1/jobs/{id}``): its row, its attempts and
its last heartbeat, of one job or of many at once (the waiters of ``?wait=``).

The statements are defined once, over an id predicate (``hipq.store.jobs``,
``hipq.store.heartbeats``). ``ViewReads`` runs them through SQLAlchemy with ``IN``,
on every dialect. PostgreSQL's ``DriverViewReads`` compiles each once with
``= ANY(array)`` and runs it on the asyncpg connection (``hipq.store.driver``): for a
check of two hundred waiters' jobs, SQLAlchemy's rendering of the ``IN`` lists and
its processing of each value cost about four fifths of the read's CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.jobs import Attempt, Job
from hipq.lifecycle import State
from hipq.store.dialects import Dialect
from hipq.store.driver import DriverStatement, any_of
from hipq.store.heartbeats import (
    Heartbeat,
    heartbeats_by_job,
    heartbeats_of_query,
    read_heartbeats_of,
)
from hipq.store.jobs import (
    attempts_by_job,
    attempts_of_query,
    jobs_of_query,
    read_attempts_of,
    read_jobs_of,
    read_states_of,
    states_of_query,
)
from hipq.store.rows import row_to_job


class ViewReads:
    """The view's reads through SQLAlchemy, on any connection of any dialect."""

    async def states_of(
        self, conn: AsyncConnection, job_ids: Sequence[int]
    ) -> list[tuple[int, State, str]]:
        """Id, state and queue of those of ``job_ids`` that exist."""
        return await read_states_of(conn, job_ids)

    async def jobs_of(self, conn: AsyncConnection, job_ids: Sequence[int]) -> list[Job]:
        return await read_jobs_of(conn, job_ids)

    async def attempts_of(
        self, conn: AsyncConnection, job_ids: Sequence[int]
    ) -> dict[int, list[Attempt]]:
        return await read_attempts_of(conn, job_ids)

    async def heartbeats_of(
        self, conn: AsyncConnection, job_ids: Sequence[int]
    ) -> dict[int, Heartbeat]:
        return await read_heartbeats_of(conn, job_ids)


def _any_id(column: Any) -> Any:
    return any_of(column, "ids")


class DriverViewReads(ViewReads):
    """PostgreSQL: the same statements on the asyncpg connection, on a connection that
    has begun no transaction on the server (the store's reads are autocommit there)."""

    _states = DriverStatement(states_of_query(_any_id))
    _jobs = DriverStatement(jobs_of_query(_any_id))
    _attempts = DriverStatement(attempts_of_query(_any_id))
    _heartbeats = DriverStatement(heartbeats_of_query(_any_id))

    async def states_of(
        self, conn: AsyncConnection, job_ids: Sequence[int]
    ) -> list[tuple[int, State, str]]:
        rows = await self._states.fetch(conn, {"ids": list(job_ids)})
        return [(i, State(s), q) for i, s, q in rows]

    async def jobs_of(self, conn: AsyncConnection, job_ids: Sequence[int]) -> list[Job]:
        return [row_to_job(r) for r in await self._jobs.fetch(conn, {"ids": list(job_ids)})]

    async def attempts_of(
        self, conn: AsyncConnection, job_ids: Sequence[int]
    ) -> dict[int, list[Attempt]]:
        return attempts_by_job(await self._attempts.fetch(conn, {"ids": list(job_ids)}))

    async def heartbeats_of(
        self, conn: AsyncConnection, job_ids: Sequence[int]
    ) -> dict[int, Heartbeat]:
        return heartbeats_by_job(await self._heartbeats.fetch(conn, {"ids": list(job_ids)}))


def view_reads_for(dialect: Dialect) -> ViewReads:
    """How the store's reads of a job's view run on ``dialect``."""
    # The driver's run needs asyncpg and a connection with no transaction begun, as the
    # store's reads are on PostgreSQL (``Dialect.reads_autocommit``).
    if dialect.name == "postgresql" and dialect.reads_autocommit:
        return DriverViewReads()
    return ViewReads()
