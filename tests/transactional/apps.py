"""An application's own transaction, through each kind of connection hipq.transactional
accepts: it writes a row of its own (``app_orders``), adds jobs, then commits or
rolls back. A refusal leaves the ``with`` block as the application's code would."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import psycopg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from hipq.transactional import add_job, add_job_async, add_jobs, add_jobs_async

Jobs = Sequence[Mapping[str, Any]]

SQLITE_KINDS = ["sqlalchemy", "sqlalchemy-session", "sqlalchemy-async", "sqlite3"]
POSTGRES_KINDS = [
    "sqlalchemy",
    "sqlalchemy-session",
    "sqlalchemy-async",
    "sqlalchemy-async-session",
    "asyncpg",
    "psycopg",
    "psycopg-async",
]
ORDER_SQL = "INSERT INTO app_orders (id) VALUES (:id)"


def urls(database_url: str) -> dict[str, str]:
    """The test database's URL for each driver."""
    if database_url.startswith("sqlite"):
        path = database_url.split("///", 1)[1]
        return {"sync": f"sqlite:///{path}", "async": database_url, "path": path}
    rest = database_url.split("://", 1)[1]
    return {
        "sync": f"postgresql+psycopg://{rest}",
        "async": database_url,
        "libpq": f"postgresql://{rest}",
    }


async def prepare(database_url: str) -> None:
    """The application's own table, empty."""
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.execute(
            sa.text("CREATE TABLE IF NOT EXISTS app_orders (id integer PRIMARY KEY)")
        )
        await conn.execute(sa.text("DELETE FROM app_orders"))
    await engine.dispose()


async def orders(database_url: str) -> list[int]:
    engine = create_async_engine(database_url)
    async with engine.connect() as conn:
        rows = (await conn.execute(sa.text("SELECT id FROM app_orders ORDER BY id"))).all()
    await engine.dispose()
    return [r[0] for r in rows]


def _add_sync(conn: Any, jobs: Jobs, one: bool) -> list[int]:
    if one:
        job = dict(jobs[0])
        return [add_job(conn, job.pop("type"), **job)]
    return add_jobs(conn, jobs)


async def _add_async(conn: Any, jobs: Jobs, one: bool) -> list[int]:
    if one:
        job = dict(jobs[0])
        return [await add_job_async(conn, job.pop("type"), **job)]
    return await add_jobs_async(conn, jobs)


async def in_transaction(
    kind: str, database_url: str, order: int, jobs: Jobs, commit: bool, one: bool = False
) -> list[int]:
    """Write order ``order`` and add ``jobs`` in one transaction of ``kind``; commit or
    roll back. The ids the jobs were given (also when rolled back)."""
    u = urls(database_url)
    if kind in ("sqlalchemy", "sqlalchemy-session", "sqlite3", "psycopg"):
        return await asyncio.to_thread(_sync_transaction, kind, u, order, jobs, commit, one)
    return await _async_transaction(kind, u, order, jobs, commit, one)


def _sync_transaction(
    kind: str, u: dict[str, str], order: int, jobs: Jobs, commit: bool, one: bool
) -> list[int]:
    if kind == "sqlite3":
        lite = sqlite3.connect(u["path"])
        try:
            with lite:  # commits on leaving, rolls back on an exception
                lite.execute(ORDER_SQL, {"id": order})
                ids = _add_sync(lite, jobs, one)
                if not commit:
                    lite.rollback()
            return ids
        finally:
            lite.close()
    if kind == "psycopg":
        with psycopg.connect(u["libpq"]) as pg:
            with pg.transaction() as tx:
                pg.execute("INSERT INTO app_orders (id) VALUES (%s)", (order,))
                ids = _add_sync(pg, jobs, one)
                if not commit:
                    raise psycopg.Rollback(tx)
            return ids
    engine = sa.create_engine(u["sync"])
    try:
        if kind == "sqlalchemy-session":
            with Session(engine) as session, session.begin():
                session.execute(sa.text(ORDER_SQL), {"id": order})
                ids = _add_sync(session, jobs, one)
                if not commit:
                    session.rollback()
            return ids
        with engine.connect() as conn, conn.begin() as tx:
            conn.execute(sa.text(ORDER_SQL), {"id": order})
            ids = _add_sync(conn, jobs, one)
            if not commit:
                tx.rollback()
        return ids
    finally:
        engine.dispose()


async def _async_transaction(
    kind: str, u: dict[str, str], order: int, jobs: Jobs, commit: bool, one: bool
) -> list[int]:
    if kind == "asyncpg":
        apg = await asyncpg.connect(u["libpq"])
        try:
            tx = apg.transaction()
            await tx.start()
            try:
                await apg.execute("INSERT INTO app_orders (id) VALUES ($1)", order)
                ids = await _add_async(apg, jobs, one)
            except BaseException:
                await tx.rollback()
                raise
            await (tx.commit() if commit else tx.rollback())
            return ids
        finally:
            await apg.close()
    if kind == "psycopg-async":
        async with await psycopg.AsyncConnection.connect(u["libpq"]) as pg:
            async with pg.transaction() as atx:
                await pg.execute("INSERT INTO app_orders (id) VALUES (%s)", (order,))
                ids = await _add_async(pg, jobs, one)
                if not commit:
                    raise psycopg.Rollback(atx)
            return ids
    engine = create_async_engine(u["async"])
    try:
        if kind == "sqlalchemy-async-session":
            async with AsyncSession(engine) as session, session.begin():
                await session.execute(sa.text(ORDER_SQL), {"id": order})
                ids = await _add_async(session, jobs, one)
                if not commit:
                    await session.rollback()
            return ids
        async with engine.connect() as conn, conn.begin() as tx:
            await conn.execute(sa.text(ORDER_SQL), {"id": order})
            ids = await _add_async(conn, jobs, one)
            if not commit:
                await tx.rollback()
        return ids
    finally:
        await engine.dispose()
