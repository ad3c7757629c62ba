"""The connections an application may hand to ``hipq.transactional``, each wrapped as a
runner of ``:name``-style statements returning rows, with the database it talks to.

SQLAlchemy (sync, asyncio, and their sessions) takes ``:name`` itself, as does
sqlite3; psycopg's ``%(name)s`` and asyncpg's ``$n`` are converted here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_NAMED = re.compile(r"(?<![:\w]):(\w+)")


class SyncRunner:
    def __init__(self, dialect: str, execute: Any) -> None:
        self.dialect, self._execute = dialect, execute

    def __call__(self, sql: str, params: dict[str, Any]) -> list[Sequence[Any]]:
        return list(self._execute(sql, params))


class AsyncRunner:
    def __init__(self, dialect: str, execute: Any) -> None:
        self.dialect, self._execute = dialect, execute

    async def __call__(self, sql: str, params: dict[str, Any]) -> list[Sequence[Any]]:
        return list(await self._execute(sql, params))


def sync_runner(conn: Any) -> SyncRunner:
    import sqlite3

    from sqlalchemy import Connection, text
    from sqlalchemy.orm import Session

    if isinstance(conn, Session):
        conn = conn.connection()
    if isinstance(conn, Connection):
        sa_conn = conn
        return SyncRunner(sa_conn.dialect.name, lambda sql, p: sa_conn.execute(text(sql), p).all())
    if isinstance(conn, sqlite3.Connection):
        lite = conn
        return SyncRunner("sqlite", lambda sql, p: lite.execute(sql, p).fetchall())
    if type(conn).__module__.startswith("psycopg"):
        pg = conn

        def run_psycopg(sql: str, params: dict[str, Any]) -> list[Any]:
            return list(pg.execute(_NAMED.sub(r"%(\1)s", sql), params).fetchall())

        return SyncRunner("postgresql", run_psycopg)
    raise TypeError(
        f"add_job needs a SQLAlchemy Connection or Session, a psycopg or a sqlite3"
        f" connection, not {type(conn).__name__} (use add_job_async for asyncio ones)"
    )


async def async_runner(conn: Any) -> AsyncRunner:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()  # the session's connection, in its transaction
    if isinstance(conn, AsyncConnection):
        sa_conn = conn

        async def run_sa(sql: str, params: dict[str, Any]) -> list[Any]:
            return list((await sa_conn.execute(text(sql), params)).all())

        return AsyncRunner(sa_conn.dialect.name, run_sa)
    module = type(conn).__module__
    if module.startswith("asyncpg"):
        apg = conn

        async def run_asyncpg(sql: str, params: dict[str, Any]) -> list[Any]:
            names: list[str] = []

            def number(match: re.Match[str]) -> str:
                names.append(match.group(1))
                return f"${len(names)}"

            return list(await apg.fetch(_NAMED.sub(number, sql), *[params[n] for n in names]))

        return AsyncRunner("postgresql", run_asyncpg)
    if module.startswith("psycopg"):
        pg = conn

        async def run_psycopg(sql: str, params: dict[str, Any]) -> list[Any]:
            cursor = await pg.execute(_NAMED.sub(r"%(\1)s", sql), params)
            return list(await cursor.fetchall())

        return AsyncRunner("postgresql", run_psycopg)
    raise TypeError(
        f"add_job_async needs a SQLAlchemy AsyncConnection or AsyncSession, an asyncpg or"
        f" a psycopg AsyncConnection, not {type(conn).__name__} (use add_job for sync ones)"
    )
