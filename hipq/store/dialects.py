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
from sqlalchemy import ARRAY, BigInteger, Select, bindparam, event, func
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


def id_in(conn: AsyncConnection, column: Any, ids: list[int]) -> Any:
    """``column IN ids``; on PostgreSQL as ``= ANY(array)``: one parameter instead of
    one per id, and one plan whatever the batch's size."""
    if conn.dialect.name == "postgresql":
        return column == func.any(bindparam("ids_array", ids, type_=ARRAY(BigInteger)))
    return column.in_(ids)


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


# PostgreSQL: a whole tick's settlements in two statements. An executemany of one
# UPDATE per job costs the server a plan execution per row; unnest() of column
# arrays lets it do the batch as one join (JSON travels as text, cast to jsonb).
_SETTLE_PG = text(
    """
    UPDATE hipq_jobs AS j
    SET state = u.state, run_at = u.run_at, payload = u.payload::jsonb,
        finished_at = u.finished_at, result = u.result::jsonb, last_error = u.last_error,
        deadline = NULL, cancel_requested = false, updated_at = :now
    FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[]), CAST(:states AS text[]),
                CAST(:run_ats AS timestamptz[]), CAST(:payloads AS text[]),
                CAST(:finished AS timestamptz[]), CAST(:results AS text[]),
                CAST(:errors AS text[]))
         AS u(id, attempt, state, run_at, payload, finished_at, result, last_error)
    WHERE j.id = u.id AND j.attempt = u.attempt AND j.state IN ('running', 'awaiting')
    """
)
_ATTEMPTS_PG = text(
    """
    INSERT INTO hipq_attempts (job_id, attempt, started_at, finished_at, outcome, error, response)
    SELECT u.job_id, u.attempt, u.started_at, u.finished_at, u.outcome, u.error,
           u.response::jsonb
    FROM unnest(CAST(:job_ids AS bigint[]), CAST(:attempts AS integer[]),
                CAST(:started AS timestamptz[]), CAST(:finished AS timestamptz[]),
                CAST(:outcomes AS text[]), CAST(:errors AS text[]), CAST(:responses AS text[]))
         AS u(job_id, attempt, started_at, finished_at, outcome, error, response)
    """
)


def _json_or_null(value: Any) -> str | None:
    return None if value is None else _json_dumps(value)


async def settle_unnest(conn: AsyncConnection, settlements: Any, now: Any) -> None:
    await conn.execute(
        _SETTLE_PG,
        {
            "now": now,
            "ids": [s.job_id for s in settlements],
            "attempts": [s.attempt for s in settlements],
            "states": [s.state.value for s in settlements],
            "run_ats": [s.run_at for s in settlements],
            "payloads": [_json_dumps(s.payload) for s in settlements],
            "finished": [s.finished_at for s in settlements],
            "results": [_json_or_null(s.result) for s in settlements],
            "errors": [s.last_error for s in settlements],
        },
    )
    records = [s.record for s in settlements if s.record is not None]
    if records:
        await conn.execute(
            _ATTEMPTS_PG,
            {
                "job_ids": [r.job_id for r in records],
                "attempts": [r.attempt for r in records],
                "started": [r.started_at for r in records],
                "finished": [r.finished_at for r in records],
                "outcomes": [r.outcome for r in records],
                "errors": [r.error for r in records],
                "responses": [_json_or_null(r.response) for r in records],
            },
        )


_INSERT_JOBS_PG = text(
    """
    INSERT INTO hipq_jobs (queue, type, state, payload, labels, windows, retry, run_at,
                           priority, weight, timeout_seconds, critical, correlation_key,
                           job_key, attempt, created_at, updated_at, cancel_requested)
    SELECT u.queue, u.type, 'scheduled', u.payload::jsonb, u.labels::jsonb, u.windows::jsonb,
           u.retry::jsonb, u.run_at, u.priority, u.weight, u.timeout_seconds, u.critical,
           u.correlation_key, u.job_key, 0, :now, :now, false
    FROM unnest(CAST(:queues AS text[]), CAST(:types AS text[]), CAST(:payloads AS text[]),
                CAST(:labels AS text[]), CAST(:windows AS text[]), CAST(:retries AS text[]),
                CAST(:run_ats AS timestamptz[]), CAST(:priorities AS integer[]),
                CAST(:weights AS integer[]), CAST(:timeouts AS float8[]),
                CAST(:criticals AS boolean[]), CAST(:correlation_keys AS text[]),
                CAST(:job_keys AS text[])) WITH ORDINALITY
         AS u(queue, type, payload, labels, windows, retry, run_at, priority, weight,
              timeout_seconds, critical, correlation_key, job_key, ord)
    ORDER BY u.ord
    RETURNING id
    """
)


async def insert_jobs_unnest(
    conn: AsyncConnection, rows: list[dict[str, Any]], now: Any
) -> list[int]:
    """PostgreSQL: insert job rows in one statement; their ids in the order given.

    The ids come from the table's sequence, drawn row by row in ``ord`` order, so
    they increase in the order given: sorting what RETURNING yields restores it.
    """
    result = await conn.execute(
        _INSERT_JOBS_PG,
        {
            "now": now,
            "queues": [r["queue"] for r in rows],
            "types": [r["type"] for r in rows],
            "payloads": [_json_dumps(r["payload"]) for r in rows],
            "labels": [_json_dumps(r["labels"]) for r in rows],
            "windows": [_json_or_null(r["windows"]) for r in rows],
            "retries": [_json_dumps(r["retry"]) for r in rows],
            "run_ats": [r["run_at"] for r in rows],
            "priorities": [r["priority"] for r in rows],
            "weights": [r["weight"] for r in rows],
            "timeouts": [r["timeout_seconds"] for r in rows],
            "criticals": [r["critical"] for r in rows],
            "correlation_keys": [r["correlation_key"] for r in rows],
            "job_keys": [r["job_key"] for r in rows],
        },
    )
    return sorted(result.scalars().all())
