"""Adding jobs inside the application's own database transaction.

An application that writes its own rows to the database hipq uses can add a job in
the same transaction: the job exists if and only if the transaction commits, and
the queue's owner is woken at the commit (PostgreSQL NOTIFY). ::

    with engine.begin() as conn:                      # the application's transaction
        conn.execute(orders.insert().values(id=17))
        add_job(conn, "send_receipt", {"order_id": 17})

A job added so is resolved and checked as a POST to ``/v1/jobs`` is: the job type's
defaults (queue, priority, weight, timeout, retry), the correlation key built from
its template, the same refusals, and a ``job_key`` decides as for a POST
(``hipq.job_keys``). On PostgreSQL the SQL function ``hipq_add_jobs``
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
from collections.abc import Generator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from hipq.ingest.app_connections import AsyncRunner, SyncRunner, async_runner, sync_runner
from hipq.ingest.mirrored_intake import (
    FIELDS,
    NAIVE,
    EnqueueError,
    Resolved,
    field_name,
    key_in_use,
    mirror_from_rows,
    resolve,
    sqlite_conflict,
    sqlite_row,
)
from hipq.job_keys import KeyAction, holder_states, key_action, replacing
from hipq.lifecycle import State
from hipq.operator_requests import key_taken_over
from hipq.store.rows import NEW_JOB_COLUMNS
from hipq.store.schema import jobs
from hipq.store.state_guards import OPEN_STATES_SQL
from hipq.store.statements import insert_sql

__all__ = ["FIELDS", "EnqueueError", "add_job", "add_job_async", "add_jobs", "add_jobs_async"]

# The SQL function's refusals: SQLSTATE HQ422 (bad input), HQ409 (a key in use).
_REFUSED = {"HQ422": False, "HQ409": True}


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
    flags: Sequence[str] | None = None,
    job_key: str | None = None,
    job_key_mode: str | None = None,
    unique_for: float | str | timedelta | None = None,
) -> int:
    """Add one job in ``conn``'s transaction; its id. Unset fields take the job type's.

    With a ``job_key``, the id is that of the job the key decides on, as for a POST
    (docs/job-keys.md): a new job, the replaced one, or the one returned unchanged."""
    job = _job_of(locals())
    return _add_sync(sync_runner(conn), [job], many=False)[0]


def add_jobs(conn: Any, jobs: Sequence[Mapping[str, Any]]) -> list[int]:
    """Add several jobs (dicts of :data:`FIELDS`) in ``conn``'s transaction, all or
    none; their ids in order."""
    return _add_sync(sync_runner(conn), list(jobs), many=True)


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
    flags: Sequence[str] | None = None,
    job_key: str | None = None,
    job_key_mode: str | None = None,
    unique_for: float | str | timedelta | None = None,
) -> int:
    """:func:`add_job` for an asyncio connection or session."""
    job = _job_of(locals())
    return (await _add_async(await async_runner(conn), [job], many=False))[0]


async def add_jobs_async(conn: Any, jobs: Sequence[Mapping[str, Any]]) -> list[int]:
    """:func:`add_jobs` for an asyncio connection or session."""
    return await _add_async(await async_runner(conn), list(jobs), many=True)


def _job_of(args: Mapping[str, Any]) -> dict[str, Any]:
    named = {k: v for k, v in args.items() if k not in ("conn", "job_type") and v is not None}
    return {"type": args["job_type"], **named}


# The statements, in SQLAlchemy's :name style (each runner converts it).
_PG_ADD = "SELECT hipq_insert_jobs(CAST(:jobs AS jsonb), {many})"
_READ_TYPES = (
    "SELECT name, queue, priority, weight, timeout_seconds, retry, correlation_key,"
    " key_parts, key_at_dispatch, labels, notify FROM hipq_job_types"
)
_READ_QUEUES = "SELECT name, concurrency FROM hipq_queue_capacities"
# An open job holding the key; a keyed job's own holder may keep it (it is replaced or
# returned; a take-over's insert meets the unique index instead).
_KEY_IN_USE = (
    f"SELECT 1 FROM hipq_jobs WHERE correlation_key = :key AND {OPEN_STATES_SQL}"
    " AND (:job_key IS NULL OR job_key IS NOT :job_key)"
)
# Keys are the service's own (its jobs' owner is ''; docs/security.md).
_KEY_CREATED_SINCE = (
    "SELECT id FROM hipq_jobs WHERE tenant = '' AND job_key = :job_key AND created_at >= :since"
    " ORDER BY created_at, id LIMIT 1"
)
_KEY_HOLDER = (
    "SELECT id, state, attempt, waiting_for, after_run_at FROM hipq_jobs"
    " WHERE tenant = '' AND job_key = :job_key"
    " AND state IN ({states})"
    f" ORDER BY CASE WHEN {OPEN_STATES_SQL} THEN 0 ELSE 1 END, id DESC LIMIT 1"
)
# (RETURNING: every runner fetches the rows of its statement.)
_TAKE_OVER = (
    "UPDATE hipq_jobs SET job_key = NULL, retry = :retry, updated_at = :now WHERE id = :id"
    " RETURNING id"
)

# The waits of a job a keyed replace replaces (as the store's keyed replace does).
_DROP_WAITS = (
    "DELETE FROM hipq_job_dependencies WHERE job_id = :id AND outcome IS NULL RETURNING job_id"
)

# One statement to run, and the rows it gave back.
Step = tuple[str, dict[str, Any]]
Steps = Generator[Step, list[Sequence[Any]], list[int]]


@cache
def _insert(columns: tuple[str, ...]) -> str:
    """The store's insert of a job row with these columns (the resolved row's)."""
    return insert_sql(jobs, columns, "named", returning_id=True)[0]


@cache
def _replace(columns: tuple[str, ...]) -> str:
    """A keyed replacement of a scheduled job's columns (hipq.job_keys.replacing)."""
    sets = ", ".join(f"{c} = :{c}" for c in columns)
    return f"UPDATE hipq_jobs SET {sets} WHERE id = :id AND state = 'scheduled' RETURNING id"


def _add_sync(run: SyncRunner, jobs: list[Mapping[str, Any]], many: bool) -> list[int]:
    if run.dialect == "postgresql":
        try:
            rows = run(_PG_ADD.format(many=str(many).lower()), {"jobs": _json_jobs(jobs, many)})
        except Exception as exc:
            refused = _refusal(exc)
            if refused is None:
                raise
            raise refused from exc
        return list(rows[0][0])
    steps = _sqlite_steps(jobs, many)
    try:
        step = next(steps)
        while True:
            try:
                rows = run(*step)
            except Exception as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(rows)
    except StopIteration as done:
        return list(done.value)


async def _add_async(run: AsyncRunner, jobs: list[Mapping[str, Any]], many: bool) -> list[int]:
    if run.dialect == "postgresql":
        try:
            sql = _PG_ADD.format(many=str(many).lower())
            rows = await run(sql, {"jobs": _json_jobs(jobs, many)})
        except Exception as exc:
            refused = _refusal(exc)
            if refused is None:
                raise
            raise refused from exc
        return list(rows[0][0])
    steps = _sqlite_steps(jobs, many)
    try:
        step = next(steps)
        while True:
            try:
                rows = await run(*step)
            except Exception as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(rows)
    except StopIteration as done:
        return list(done.value)


def _sqlite_steps(jobs: list[Mapping[str, Any]], many: bool) -> Steps:
    """SQLite's path, as the statements to run (one copy for sync and async callers):
    the jobs resolved against the mirror, each inserted, or decided by its job_key."""
    types, queues = mirror_from_rows((yield _READ_TYPES, {}), (yield _READ_QUEUES, {}))
    now = datetime.now(UTC)
    ids = []
    for i, job in enumerate(resolve(jobs, types, queues, now, many)):
        row = job.row
        key = row["correlation_key"]
        if key is not None and (yield _KEY_IN_USE, {"key": key, "job_key": row["job_key"]}):
            raise key_in_use(i, many)
        if row["job_key"] is not None:
            found = yield from _keyed(job, now)
            if found is not None:
                ids.append(found)
                continue
        try:
            ids.append((yield _insert(tuple(row)), sqlite_row(row))[0][0])
        except Exception as exc:
            taken = sqlite_conflict(exc, i, many)
            if taken is None:
                raise
            raise taken from exc
    return ids


def _keyed(job: Resolved, now: datetime) -> Generator[Step, list[Sequence[Any]], int | None]:
    """The job of its key that a keyed job is (hipq.job_keys), or None when it is to be
    inserted. SQLite has one writer at a time: no other transaction adds the key between
    this look and the insert."""
    row, key = job.row, job.row["job_key"]
    earlier: list[Sequence[Any]] = []
    if job.unique_for_seconds is not None:
        since = now - timedelta(seconds=job.unique_for_seconds)
        earlier = yield _KEY_CREATED_SINCE, sqlite_row({"job_key": key, "since": since})
    holder: list[Sequence[Any]] = []
    if not earlier:
        states = ", ".join(f"'{s.value}'" for s in sorted(holder_states(job.job_key_mode)))
        holder = yield _KEY_HOLDER.format(states=states), {"job_key": key}
    state = (State(holder[0][1]), holder[0][2]) if holder else None
    action = key_action(job.job_key_mode, state, in_period=bool(earlier))
    if action is KeyAction.RETURN:
        return int((earlier or holder)[0][0])
    if action is KeyAction.INSERT:
        return None
    holder_id = int(holder[0][0])
    if action is KeyAction.TAKE_OVER:
        params = {"id": holder_id, "retry": key_taken_over({}), "now": now}
        yield _TAKE_OVER, sqlite_row(params)
        return None
    changes = replacing({k: v for k, v in row.items() if k in NEW_JOB_COLUMNS}, action, now)
    if (holder[0][3] or 0) > 0:
        # What it waits for is replaced too: a job added here waits for nothing, and
        # runs at the new job's run_at (preserve_run_at: its own, kept while it waited).
        yield _DROP_WAITS, {"id": holder_id}
        changes.update(waiting_for=0, after=None, after_failed=None)
        changes.setdefault("run_at", holder[0][4] or now)
    yield _replace(tuple(changes)), sqlite_row({**changes, "id": holder_id})
    return holder_id


def _json_jobs(jobs: list[Mapping[str, Any]], many: bool) -> str:
    """The jobs as the SQL function's JSON; an instant must carry its offset."""
    for i, job in enumerate(jobs):
        run_at = job.get("run_at") if isinstance(job, Mapping) else None
        if isinstance(run_at, datetime) and run_at.tzinfo is None:
            raise EnqueueError(field_name(i, many, "run_at"), NAIVE)

    def instant(value: Any) -> str | float:
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, timedelta):  # unique_for
            return value.total_seconds()
        raise TypeError(f"{type(value).__name__} is not JSON serializable")

    return json.dumps([dict(j) if isinstance(j, Mapping) else j for j in jobs], default=instant)


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
            return key_in_use(None, False)
        pending += [getattr(err, "orig", None), err.__cause__]
    return None
