"""Where SQLite and PostgreSQL must differ. Everything else in the store is shared SQL.

- SQLite: one file, WAL with synchronous=FULL (a committed job survives power
  loss), write transactions begin IMMEDIATE so that a read-then-write transaction
  never fails halfway on a lock upgrade, and a busy timeout instead of errors.
- PostgreSQL: FOR UPDATE SKIP LOCKED on the due scan (an API edit holding a row
  never blocks the loop), and NOTIFY to wake the owner of a queue in another process.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import Select, event, func
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql import text

NOTIFY_CHANNEL = "hipq_jobs"
ALL_QUEUES = "*"  # NOTIFY payload that wakes every queue (a response may be for any)
CANCEL_PREFIX = "cancel:"  # NOTIFY payload "cancel:<queue>": a running job was asked to stop
SQLITE_BUSY_TIMEOUT_MS = 30_000


class StoreSetupError(RuntimeError):
    """The database cannot be used as configured (message says why)."""


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    if url.startswith("postgresql"):
        # The API's concurrent requests and the loops share the pool; a small pool
        # makes each request beyond it open a new connection.
        kwargs.setdefault("pool_size", 20)
        kwargs.setdefault("max_overflow", 20)
    engine = create_async_engine(
        url, json_serializer=_json_dumps, json_deserializer=orjson.loads, **kwargs
    )
    if engine.dialect.name == "sqlite":
        _prepare_sqlite(engine)
    elif engine.dialect.name != "postgresql":
        raise StoreSetupError(
            f"unsupported database {engine.dialect.name!r}: use SQLite or PostgreSQL"
        )
    return engine


def _prepare_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take over transaction control from the driver so BEGIN can be IMMEDIATE.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = "IMMEDIATE" if conn.get_execution_options().get("hipq_write") else "DEFERRED"
        conn.exec_driver_sql(f"BEGIN {mode}")


async def check_engine(conn: AsyncConnection) -> None:
    """Refuse to run on a database that would not keep what hipq promises."""
    if conn.dialect.name != "sqlite":
        return
    mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
    sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
    version = (await conn.exec_driver_sql("select sqlite_version()")).scalar()
    if str(mode).lower() != "wal" or int(sync) != 2:
        raise StoreSetupError(
            f"SQLite runs with journal_mode={mode}, synchronous={sync}; hipq needs WAL and FULL (2)"
        )
    if tuple(int(p) for p in str(version).split(".")[:2]) < (3, 35):
        raise StoreSetupError(f"SQLite {version} is too old: hipq needs 3.35 or newer (RETURNING)")


def dialect_insert(conn: AsyncConnection, table: Any) -> Any:
    return (postgresql if conn.dialect.name == "postgresql" else sqlite).insert(table)


def lock_due(conn: AsyncConnection, query: Select[Any]) -> Select[Any]:
    # SQLite serialises writers (BEGIN IMMEDIATE), so there is nothing to lock.
    if conn.dialect.name == "postgresql":
        return query.with_for_update(skip_locked=True)
    return query


def epoch_seconds(conn: AsyncConnection, column: Any) -> Any:
    """Seconds since 1970 of a timestamp column, in SQL (for aging's ORDER BY)."""
    if conn.dialect.name == "postgresql":
        return func.extract("epoch", column)
    # Our SQLite timestamps are ISO strings in UTC, which julianday() reads.
    return (func.julianday(column) - 2440587.5) * 86400.0


async def notify(conn: AsyncConnection, queues: set[str]) -> None:
    """Wake the owners of ``queues`` in other processes (delivered at commit)."""
    if conn.dialect.name != "postgresql":
        return
    for queue in sorted(queues):
        await conn.execute(text("SELECT pg_notify(:ch, :q)"), {"ch": NOTIFY_CHANNEL, "q": queue})
