"""The reads behind a job's view (``GET /v1/jobs/{id}``): its row, its attempts and
its last heartbeat, of one job or of many at once (the waiters of ``?wait=``).

The statements are defined once, over an id predicate (``hipq.store.jobs``,
``hipq.store.heartbeats``). ``ViewReads`` runs them through SQLAlchemy with ``IN``,
on any connection. The store's own reads run them on the driver's connection, each
compiled once with one parameter for all its ids: for a check of two hundred
waiters' jobs, SQLAlchemy's rendering of the ``IN`` lists, its rows and the layers
around each value's conversion cost most of the read's CPU.

- PostgreSQL (``DriverViewReads``): ``= ANY(array)`` on the asyncpg connection
  (``hipq.store.driver``), whose codecs convert the values.
- SQLite (``SqliteViewReads``): ``IN (SELECT value FROM json_each(?))`` on the
  aiosqlite connection, one hop to its thread per statement instead of four, inside
  the read's transaction; each value converted by its column's own result processor,
  as SQLAlchemy would.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from sqlalchemy import JSON, Select, bindparam, func, literal_column, select
from sqlalchemy.engine.interfaces import Dialect as SqlDialect
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.jobs import Attempt, Job
from hipq.lifecycle import State
from hipq.store.dialects import Dialect, json_loads, sqlite_error
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


def _json_each_id(column: Any) -> Any:
    return column.in_(select(literal_column("value")).select_from(func.json_each(bindparam("ids"))))


Query = Callable[[Callable[[Any], Any]], Select[Any]]


class _SqliteStatement:
    """A statement compiled once for SQLite, its ids one JSON parameter, and per
    column the result processor SQLAlchemy applies to it on the engine's dialect."""

    def __init__(self, query: Query) -> None:
        self.query = query(_json_each_id)
        self._plans: dict[int, tuple[str, list[tuple[int, Any]]]] = {}

    def _plan(self, dialect: SqlDialect) -> tuple[str, list[tuple[int, Any]]]:
        plan = self._plans.get(id(dialect))
        if plan is None:
            sql = str(self.query.compile(dialect=dialect))
            processors = [
                # JSON: the store's engines' deserializer itself, without the layers
                # of SQLAlchemy's processors around it.
                (i, json_loads if isinstance(c.type, JSON) else _processor(c.type, dialect))
                for i, c in enumerate(self.query.selected_columns)
            ]
            plan = self._plans[id(dialect)] = (sql, [(i, p) for i, p in processors if p])
        return plan

    async def rows(self, conn: AsyncConnection, job_ids: Sequence[int]) -> list[list[Any]]:
        sql, processors = self._plan(conn.dialect)
        driver: Any = (await conn.get_raw_connection()).driver_connection
        try:
            fetched = await driver.execute_fetchall(sql, (orjson.dumps(list(job_ids)).decode(),))
        except sqlite3.Error as exc:
            raise sqlite_error(sql, exc) from exc
        rows = [list(r) for r in fetched]
        for row in rows:
            for i, process in processors:
                if (value := row[i]) is not None:
                    row[i] = process(value)
        return rows


def _processor(column_type: Any, dialect: SqlDialect) -> Any:
    return column_type.dialect_impl(dialect).result_processor(dialect, None)


class SqliteViewReads(ViewReads):
    """SQLite: the same statements on the aiosqlite connection, inside the
    transaction SQLAlchemy began on it (BEGIN is sent when the read begins)."""

    _states = _SqliteStatement(states_of_query)
    _jobs = _SqliteStatement(jobs_of_query)
    _attempts = _SqliteStatement(attempts_of_query)
    _heartbeats = _SqliteStatement(heartbeats_of_query)

    async def states_of(
        self, conn: AsyncConnection, job_ids: Sequence[int]
    ) -> list[tuple[int, State, str]]:
        return [(i, State(s), q) for i, s, q in await self._states.rows(conn, job_ids)]

    async def jobs_of(self, conn: AsyncConnection, job_ids: Sequence[int]) -> list[Job]:
        return [row_to_job(r) for r in await self._jobs.rows(conn, job_ids)]

    async def attempts_of(
        self, conn: AsyncConnection, job_ids: Sequence[int]
    ) -> dict[int, list[Attempt]]:
        return attempts_by_job(await self._attempts.rows(conn, job_ids))

    async def heartbeats_of(
        self, conn: AsyncConnection, job_ids: Sequence[int]
    ) -> dict[int, Heartbeat]:
        return heartbeats_by_job(await self._heartbeats.rows(conn, job_ids))


def view_reads_for(dialect: Dialect) -> ViewReads:
    """How the store's reads of a job's view run on ``dialect``."""
    if dialect.name == "postgresql" and dialect.reads_autocommit:
        # The driver's run needs a connection with no transaction begun on the server.
        return DriverViewReads()
    if dialect.name == "sqlite":
        return SqliteViewReads()
    return ViewReads()
