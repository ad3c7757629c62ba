"""Adding jobs inside the application's own database transaction.

An application that writes its own rows to the database hipq uses can add a job in
the same transaction: the job exists if and only if the transaction commits, and
the queue's owner is woken at the commit (PostgreSQL NOTIFY). ::

    with engine.begin() as conn:                      # the application's transaction
        conn.execute(orders.insert().values(id=17))
        add_job(conn, "send_receipt", {"order_id": 17})

A job added so is resolved and checked as a POST to ``/v1/jobs`` is: the job type's
defaults (queue, priority, weight, timeout, retry), the correlation key built from
its template, the same refusals. On PostgreSQL the SQL function ``hipq_add_jobs``
does it (an application may also call ``hipq_add_job(...)`` in SQL directly); on
SQLite, which has no SQL functions, this module does it against the job types the
serving hipq process mirrored into the database (``hipq_job_types``).

A refused job raises :class:`EnqueueError` (``field`` and ``message`` as the API
names them). On PostgreSQL the transaction is then aborted, as after any SQL error:
roll it back. On SQLite nothing was written by the call; letting the error leave
the ``with`` block rolls back the application's other writes too.

Accepted connections: SQLAlchemy ``Connection``/``Session`` and their asyncio
forms, ``psycopg`` connections (sync and async), ``asyncpg`` connections, and
``sqlite3`` connections. Use :func:`add_job`/:func:`add_jobs` with the sync ones,
:func:`add_job_async`/:func:`add_jobs_async` with the async ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from hipq.store.job_types_mirror import MirroredJobType, MirroredQueue
from hipq.templates import JOB_ROOTS, TemplateError, compile_template, new_job_context

__all__ = ["EnqueueError", "add_job", "add_job_async", "add_jobs", "add_jobs_async"]

# The fields of a job as hipq_add_jobs takes them (JSON); ``type`` is required.
FIELDS = (
    "type payload queue run_at priority weight labels timeout_seconds max_attempts critical "
    "correlation_key"
).split()
_OPEN_STATES = ("scheduled", "running", "awaiting")
_INT32 = 2147483647
_MAX_TIMEOUT_SECONDS = 3650 * 86400.0
_KEY_MAX_LENGTH = 500
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(:\d\d(\.\d+)?)?([Zz]|[+-]\d\d(:?\d\d)?)$")
# The SQL function's refusals: SQLSTATE HQ422 (bad input), HQ409 (a key in use).
_REFUSED = {"HQ422": False, "HQ409": True}


class EnqueueError(ValueError):
    """A job the database refused; ``field`` names it as the API does (``jobs[3].type``).

    ``conflict`` is true when an open job holds its correlation key (the API's 409).
    """

    def __init__(self, field: str, message: str, conflict: bool = False) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.conflict = field, message, conflict


def add_job(
    conn: Any,
    job_type: str,
    payload: Mapping[str, Any] | None = None,
    *,
    queue: str | None = None,
    run_at: datetime | None = None,
    priority: int | None = None,
    weight: int | None = None,
    labels: Mapping[str, str] | None = None,
    timeout_seconds: float | None = None,
    max_attempts: int | None = None,
    critical: bool | None = None,
    correlation_key: str | None = None,
) -> int:
    """Add one job in ``conn``'s transaction; its id. Unset fields take the job type's."""
    job = _job_of(locals())
    return _add_sync(_sync_runner(conn), [job], many=False)[0]


def add_jobs(conn: Any, jobs: Sequence[Mapping[str, Any]]) -> list[int]:
    """Add several jobs (dicts of :data:`FIELDS`) in ``conn``'s transaction, all or
    none; their ids in order."""
    return _add_sync(_sync_runner(conn), list(jobs), many=True)


async def add_job_async(
    conn: Any,
    job_type: str,
    payload: Mapping[str, Any] | None = None,
    *,
    queue: str | None = None,
    run_at: datetime | None = None,
    priority: int | None = None,
    weight: int | None = None,
    labels: Mapping[str, str] | None = None,
    timeout_seconds: float | None = None,
    max_attempts: int | None = None,
    critical: bool | None = None,
    correlation_key: str | None = None,
) -> int:
    """:func:`add_job` for an asyncio connection or session."""
    job = _job_of(locals())
    return (await _add_async(await _async_runner(conn), [job], many=False))[0]


async def add_jobs_async(conn: Any, jobs: Sequence[Mapping[str, Any]]) -> list[int]:
    """:func:`add_jobs` for an asyncio connection or session."""
    return await _add_async(await _async_runner(conn), list(jobs), many=True)


def _job_of(args: Mapping[str, Any]) -> dict[str, Any]:
    named = {k: v for k, v in args.items() if k not in ("conn", "job_type") and v is not None}
    return {"type": args["job_type"], **named}


# --------------------------------------------------------------------------- #
# The statements, in SQLAlchemy's :name style (each runner converts it).
# --------------------------------------------------------------------------- #

_PG_ADD = "SELECT hipq_insert_jobs(CAST(:jobs AS jsonb), {many})"
_READ_TYPES = (
    "SELECT name, queue, priority, weight, timeout_seconds, retry, correlation_key,"
    " key_parts, key_at_dispatch FROM hipq_job_types"
)
_READ_QUEUES = "SELECT name, concurrency FROM hipq_queue_capacities"
_KEY_IN_USE = (
    "SELECT 1 FROM hipq_jobs WHERE correlation_key = :key"
    " AND state IN ('scheduled', 'running', 'awaiting')"
)
_ROW_COLUMNS = (
    "queue type state payload labels windows retry run_at priority weight timeout_seconds "
    "critical correlation_key job_key attempt created_at updated_at cancel_requested"
).split()
_INSERT = (
    f"INSERT INTO hipq_jobs ({', '.join(_ROW_COLUMNS)})"
    f" VALUES ({', '.join(':' + c for c in _ROW_COLUMNS)}) RETURNING id"
)


def _add_sync(run: _SyncRunner, jobs: list[Mapping[str, Any]], many: bool) -> list[int]:
    if run.dialect == "postgresql":
        try:
            rows = run(_PG_ADD.format(many=str(many).lower()), {"jobs": _json_jobs(jobs, many)})
        except Exception as exc:
            raise _refusal(exc) or exc from exc
        return list(rows[0][0])
    types, queues = _mirror(run(_READ_TYPES, {}), run(_READ_QUEUES, {}))
    ids = []
    for i, row in enumerate(resolve(jobs, types, queues, datetime.now(UTC), many)):
        if row["correlation_key"] is not None and run(_KEY_IN_USE, {"key": row["correlation_key"]}):
            raise _key_in_use(i, many)
        try:
            ids.append(run(_INSERT, _sqlite_row(row))[0][0])
        except Exception as exc:
            raise _sqlite_conflict(exc, i, many) or exc from exc
    return ids


async def _add_async(run: _AsyncRunner, jobs: list[Mapping[str, Any]], many: bool) -> list[int]:
    if run.dialect == "postgresql":
        try:
            sql = _PG_ADD.format(many=str(many).lower())
            rows = await run(sql, {"jobs": _json_jobs(jobs, many)})
        except Exception as exc:
            raise _refusal(exc) or exc from exc
        return list(rows[0][0])
    types, queues = _mirror(await run(_READ_TYPES, {}), await run(_READ_QUEUES, {}))
    ids = []
    for i, row in enumerate(resolve(jobs, types, queues, datetime.now(UTC), many)):
        key = row["correlation_key"]
        if key is not None and await run(_KEY_IN_USE, {"key": key}):
            raise _key_in_use(i, many)
        try:
            ids.append((await run(_INSERT, _sqlite_row(row)))[0][0])
        except Exception as exc:
            raise _sqlite_conflict(exc, i, many) or exc from exc
    return ids


def _json_jobs(jobs: list[Mapping[str, Any]], many: bool) -> str:
    """The jobs as the SQL function's JSON; an instant must carry its offset."""
    for i, job in enumerate(jobs):
        run_at = job.get("run_at") if isinstance(job, Mapping) else None
        if isinstance(run_at, datetime) and run_at.tzinfo is None:
            raise EnqueueError(_where(i, many, "run_at"), _NAIVE)

    def instant(value: Any) -> str:
        if isinstance(value, datetime):
            return value.isoformat()
        raise TypeError(f"{type(value).__name__} is not JSON serializable")

    return json.dumps([dict(j) if isinstance(j, Mapping) else j for j in jobs], default=instant)


_NAIVE = "needs a time zone (an aware datetime)"


def _refusal(exc: BaseException) -> EnqueueError | None:
    """The SQL function's refusal in whichever driver's error carries it."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        err = pending.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        state = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)
        if state in _REFUSED:
            diag = getattr(err, "diag", None)  # psycopg
            field = getattr(err, "column_name", None) or getattr(diag, "column_name", None)
            detail = getattr(err, "detail", None) or getattr(diag, "message_detail", None)
            if field and detail:
                return EnqueueError(field, detail, conflict=_REFUSED[state])
        if state == "23505" and "correlation_key" in str(err):
            # Another transaction took the key between the function's check and its
            # insert: the unique index decided (which job of a list is not known).
            return _key_in_use(None, False)
        pending += [getattr(err, "orig", None), err.__cause__]
    return None


# --------------------------------------------------------------------------- #
# Resolution without SQL functions (SQLite): the rules of hipq_insert_jobs.
# --------------------------------------------------------------------------- #


def _mirror(
    type_rows: list[Sequence[Any]], queue_rows: list[Sequence[Any]]
) -> tuple[dict[str, MirroredJobType], dict[str, MirroredQueue]]:
    types = {}
    for name, queue, priority, weight, timeout, retry, key, parts, at_dispatch in type_rows:
        types[name] = MirroredJobType(
            name=name,
            queue=queue,
            priority=priority,
            weight=weight,
            timeout_seconds=float(timeout),
            retry=_loaded(retry),
            correlation_key=key,
            key_parts=_loaded(parts),
            key_at_dispatch=bool(at_dispatch),
        )
    return types, {name: MirroredQueue(name, capacity) for name, capacity in queue_rows}


def _loaded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _where(index: int, many: bool, name: str) -> str:
    return f"jobs[{index}].{name}" if many else name


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def resolve(
    jobs: Sequence[Any],
    types: Mapping[str, MirroredJobType],
    queues: Mapping[str, MirroredQueue],
    now: datetime,
    many: bool = True,
) -> list[dict[str, Any]]:
    """Each job as the row ``hipq_insert_jobs`` would insert, or the same refusal."""
    if not jobs:
        raise EnqueueError("jobs", "must hold at least one job")
    return [_resolve_one(job, i, many, types, queues, now) for i, job in enumerate(jobs)]


def _resolve_one(
    job: Any,
    index: int,
    many: bool,
    types: Mapping[str, MirroredJobType],
    queues: Mapping[str, MirroredQueue],
    now: datetime,
) -> dict[str, Any]:
    def refuse(name: str, message: str) -> EnqueueError:
        return EnqueueError(_where(index, many, name), message)

    if not isinstance(job, Mapping):
        raise EnqueueError(f"jobs[{index}]" if many else "job", "must be a JSON object")
    job = {k: v for k, v in job.items() if v is not None}
    extra = sorted(k for k in job if k not in FIELDS)
    if extra:
        raise refuse(extra[0], f"unknown field (known: {', '.join(FIELDS)})")
    name = job.get("type")
    if not isinstance(name, str):
        raise refuse("type", "must be the name of a job type")
    jt = types.get(name)
    if jt is None:
        known = ", ".join(sorted(types)) or "none: no hipq process has started on this database yet"
        raise refuse("type", f"unknown job type {name!r} (known: {known})")
    queue = job.get("queue", jt.queue)
    if not isinstance(queue, str):
        raise refuse("queue", "must be a string")
    if queue not in queues:
        raise refuse("queue", f"unknown queue {queue!r}")
    payload = job.get("payload", {})
    if not isinstance(payload, Mapping):
        raise refuse("payload", "must be a JSON object")
    labels = job.get("labels", {})
    if not isinstance(labels, Mapping):
        raise refuse("labels", "must be a JSON object of strings")
    bad_label = sorted(k for k, v in labels.items() if not isinstance(v, str))
    if bad_label:
        raise refuse(f"labels.{bad_label[0]}", "must be a string")
    run_at = _run_at(job.get("run_at"), now, refuse)
    priority = job.get("priority", jt.priority)
    if not _is_int(priority) or abs(priority) > _INT32:
        raise refuse("priority", f"must be an integer between -{_INT32} and {_INT32}")
    weight = job.get("weight", jt.weight)
    if not _is_int(weight) or not 1 <= weight <= 1_000_000:
        raise refuse("weight", "must be an integer between 1 and 1000000")
    capacity = queues[queue].concurrency
    if capacity is not None and weight > capacity:
        raise refuse("weight", f"{int(weight)} exceeds the capacity {capacity} of queue {queue}")
    timeout = job.get("timeout_seconds", jt.timeout_seconds)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise refuse("timeout_seconds", "must be a number of seconds")
    if timeout <= 0:
        raise refuse("timeout_seconds", "must be greater than zero")
    if timeout > _MAX_TIMEOUT_SECONDS:
        raise refuse("timeout_seconds", "must be at most 3650d")
    retry = dict(jt.retry)
    if "max_attempts" in job:
        attempts = job["max_attempts"]
        if not _is_int(attempts) or not 1 <= attempts <= 10_000:
            raise refuse("max_attempts", "must be an integer between 1 and 10000")
        if retry.get("strategy") == "none" and attempts > 1:
            raise refuse("max_attempts", f"job type {name} never retries (retry strategy none)")
        retry["max_attempts"] = int(attempts)
    critical = job.get("critical", False)
    if not isinstance(critical, bool):
        raise refuse("critical", "must be true or false")
    key = _correlation_key(job, jt, payload, labels, refuse)
    return {
        "queue": queue,
        "type": name,
        "state": "scheduled",
        "payload": dict(payload),
        "labels": dict(labels),
        "windows": None,
        "retry": retry,
        "run_at": run_at,
        "priority": int(priority),
        "weight": int(weight),
        "timeout_seconds": float(timeout),
        "critical": critical,
        "correlation_key": key,
        "job_key": None,
        "attempt": 0,
        "created_at": now,
        "updated_at": now,
        "cancel_requested": False,
    }


def _run_at(value: Any, now: datetime, refuse: Any) -> datetime:
    if value is None:
        return now
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise refuse("run_at", _NAIVE)
        return value.astimezone(UTC)
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise refuse(
            "run_at", "must be an RFC 3339 instant with an offset, e.g. 2026-01-05T12:00:00Z"
        )
    try:
        return datetime.fromisoformat(value.replace("z", "Z")).astimezone(UTC)
    except ValueError:
        raise refuse("run_at", "is not a valid instant") from None


def _correlation_key(
    job: Mapping[str, Any],
    jt: MirroredJobType,
    payload: Mapping[str, Any],
    labels: Mapping[str, str],
    refuse: Any,
) -> str | None:
    key = job.get("correlation_key")
    if key is not None:
        if not isinstance(key, str):
            raise refuse("correlation_key", "must be a string")
        if jt.key_at_dispatch:
            raise refuse(
                "correlation_key",
                f"job type {jt.name} builds its key per attempt ({jt.correlation_key})",
            )
    elif jt.correlation_key is not None and not jt.key_at_dispatch:
        template = compile_template(jt.correlation_key, JOB_ROOTS)
        try:
            key = template.render(new_job_context(jt.name, payload, labels))
        except TemplateError as exc:
            raise refuse("payload", f"correlation key: {exc}") from None
    if key is None:
        return None
    if not key:
        raise refuse("correlation_key", "a correlation key must not be empty")
    if _CONTROL.search(key):
        raise refuse(
            "correlation_key",
            "a correlation key must not contain control characters (such as a newline)",
        )
    if len(key) > _KEY_MAX_LENGTH:
        raise refuse("correlation_key", f"must be at most {_KEY_MAX_LENGTH} characters")
    return key


def _key_in_use(index: int | None, many: bool) -> EnqueueError:
    return EnqueueError(
        "correlation_key" if index is None else _where(index, many, "correlation_key"),
        "correlation_key is already used by an open job",
        conflict=True,
    )


def _sqlite_conflict(exc: Exception, index: int, many: bool) -> EnqueueError | None:
    """A key taken by another writer between the check and the insert (the unique index)."""
    text = str(exc)
    if "UNIQUE constraint failed" in text and "correlation_key" in text:
        return _key_in_use(index, many)
    return None


def _sqlite_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A resolved row as hipq stores it on SQLite (``hipq.store.schema``): JSON as text,
    instants as fixed-width UTC text, booleans as 0/1."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if isinstance(value, datetime):
            out[name] = value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")
        elif isinstance(value, dict | list):
            out[name] = json.dumps(value)
        elif isinstance(value, bool):
            out[name] = int(value)
        else:
            out[name] = value
    return out


# --------------------------------------------------------------------------- #
# Connections: one runner per kind, each executing a :name-style statement.
# --------------------------------------------------------------------------- #

_NAMED = re.compile(r"(?<![:\w]):(\w+)")


class _SyncRunner:
    def __init__(self, dialect: str, execute: Any) -> None:
        self.dialect, self._execute = dialect, execute

    def __call__(self, sql: str, params: dict[str, Any]) -> list[Sequence[Any]]:
        return list(self._execute(sql, params))


class _AsyncRunner:
    def __init__(self, dialect: str, execute: Any) -> None:
        self.dialect, self._execute = dialect, execute

    async def __call__(self, sql: str, params: dict[str, Any]) -> list[Sequence[Any]]:
        return list(await self._execute(sql, params))


def _sync_runner(conn: Any) -> _SyncRunner:
    import sqlite3

    from sqlalchemy import Connection, text
    from sqlalchemy.orm import Session

    if isinstance(conn, Session):
        conn = conn.connection()
    if isinstance(conn, Connection):
        sa_conn = conn
        return _SyncRunner(sa_conn.dialect.name, lambda sql, p: sa_conn.execute(text(sql), p).all())
    if isinstance(conn, sqlite3.Connection):
        lite = conn
        return _SyncRunner("sqlite", lambda sql, p: lite.execute(sql, p).fetchall())
    if type(conn).__module__.startswith("psycopg"):
        pg = conn

        def run_psycopg(sql: str, params: dict[str, Any]) -> list[Any]:
            return list(pg.execute(_NAMED.sub(r"%(\1)s", sql), params).fetchall())

        return _SyncRunner("postgresql", run_psycopg)
    raise TypeError(
        f"add_job needs a SQLAlchemy Connection or Session, a psycopg or a sqlite3"
        f" connection, not {type(conn).__name__} (use add_job_async for asyncio ones)"
    )


async def _async_runner(conn: Any) -> _AsyncRunner:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    if isinstance(conn, AsyncSession):
        conn = await conn.connection()  # the session's connection, in its transaction
    if isinstance(conn, AsyncConnection):
        sa_conn = conn

        async def run_sa(sql: str, params: dict[str, Any]) -> list[Any]:
            return list((await sa_conn.execute(text(sql), params)).all())

        return _AsyncRunner(sa_conn.dialect.name, run_sa)
    module = type(conn).__module__
    if module.startswith("asyncpg"):
        apg = conn

        async def run_asyncpg(sql: str, params: dict[str, Any]) -> list[Any]:
            names: list[str] = []

            def number(match: re.Match[str]) -> str:
                names.append(match.group(1))
                return f"${len(names)}"

            return list(await apg.fetch(_NAMED.sub(number, sql), *[params[n] for n in names]))

        return _AsyncRunner("postgresql", run_asyncpg)
    if module.startswith("psycopg"):
        pg = conn

        async def run_psycopg(sql: str, params: dict[str, Any]) -> list[Any]:
            cursor = await pg.execute(_NAMED.sub(r"%(\1)s", sql), params)
            return list(await cursor.fetchall())

        return _AsyncRunner("postgresql", run_psycopg)
    raise TypeError(
        f"add_job_async needs a SQLAlchemy AsyncConnection or AsyncSession, an asyncpg or"
        f" a psycopg AsyncConnection, not {type(conn).__name__} (use add_job for sync ones)"
    )
