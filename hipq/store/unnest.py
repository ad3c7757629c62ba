"""PostgreSQL's whole-batch statements: one statement over column arrays.

An executemany of one statement per row costs the server a plan execution per
row; ``unnest()`` of column arrays lets it do the batch as one join (JSON travels
as text, cast to jsonb).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import text

from hipq.jobs import Attempt
from hipq.outcomes import Settlement
from hipq.store.driver import DriverStatement
from hipq.store.state_guards import SETTLE


def json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _json_or_null(value: Any) -> str | None:
    return None if value is None else json_dumps(value)


_SETTLE_FROM = ", ".join(f"'{s.value}'" for s in sorted(SETTLE.sources))
# A whole tick's settlements; with attempt records, one statement for both tables
# (two data-modifying parts of one WITH: one round trip).
_SETTLE_SQL = """
    UPDATE hipq_jobs AS j
    SET state = u.state, run_at = u.run_at, payload = u.payload::jsonb,
        finished_at = u.finished_at, result = u.result::jsonb, last_error = u.last_error,
        deadline = NULL, cancel_requested = false, updated_at = :now
    FROM {fence}unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[]),
                CAST(:states AS text[]), CAST(:run_ats AS timestamptz[]), CAST(:payloads AS text[]),
                CAST(:finished AS timestamptz[]), CAST(:results AS text[]),
                CAST(:errors AS text[]))
         AS u(id, attempt, state, run_at, payload, finished_at, result, last_error)
    WHERE j.id = u.id AND j.attempt = u.attempt AND j.state IN ({settle_from})
"""
# A row already there (the same settlement again, after a lost COMMIT reply) is kept.
_ATTEMPTS_SQL = """
    INSERT INTO hipq_attempts (job_id, attempt, started_at, finished_at, outcome, error, response)
    SELECT r.job_id, r.attempt, r.started_at, r.finished_at, r.outcome, r.error,
           r.response::jsonb
    FROM {fence}unnest(CAST(:r_job_ids AS bigint[]), CAST(:r_attempts AS integer[]),
                CAST(:r_started AS timestamptz[]), CAST(:r_finished AS timestamptz[]),
                CAST(:r_outcomes AS text[]), CAST(:r_errors AS text[]),
                CAST(:r_responses AS text[]))
         AS r(job_id, attempt, started_at, finished_at, outcome, error, response)
    ON CONFLICT DO NOTHING
"""
_SETTLE = text(_SETTLE_SQL.format(fence="", settle_from=_SETTLE_FROM))
_SETTLE_AND_RECORD = text(
    f"WITH settled AS ({_SETTLE.text}), recorded AS ({_ATTEMPTS_SQL.format(fence='')}) SELECT 1"
)
# The loop's lease fence with them (``hipq.store.tick_sql``): both parts join its row,
# so a fence that matched none writes nothing, and the statement returns no row.
_FENCE_SQL = (
    "fence AS (UPDATE hipq_queues SET lease_expires_at = :f_expires"
    " WHERE name = :f_queue AND lease_owner = :f_owner AND lease_token = :f_token"
    " RETURNING paused, forbidden_flags)"
)
_SETTLE_FENCED = (
    f"WITH {_FENCE_SQL}, "
    f"settled AS ({_SETTLE_SQL.format(fence='fence, ', settle_from=_SETTLE_FROM)}) "
    "SELECT paused, forbidden_flags FROM fence"
)
_SETTLE_AND_RECORD_FENCED = (
    f"WITH {_FENCE_SQL}, "
    f"settled AS ({_SETTLE_SQL.format(fence='fence, ', settle_from=_SETTLE_FROM)}), "
    f"recorded AS ({_ATTEMPTS_SQL.format(fence='fence, ')}) "
    "SELECT paused, forbidden_flags FROM fence"
)


# The same statements for the asyncpg connection itself (the loop's tick).
_SETTLE_RAW = DriverStatement(_SETTLE)
_SETTLE_AND_RECORD_RAW = DriverStatement(_SETTLE_AND_RECORD)
_SETTLE_FENCED_RAW = DriverStatement(text(_SETTLE_FENCED))
_SETTLE_AND_RECORD_FENCED_RAW = DriverStatement(text(_SETTLE_AND_RECORD_FENCED))


async def job_settle(
    conn: AsyncConnection, settlements: Sequence[Settlement], now: datetime
) -> None:
    params = _settle_params(settlements, now)
    records = [s.record for s in settlements if s.record is not None]
    if not records:
        await conn.execute(_SETTLE, params)
        return
    params.update(_record_params(records))
    await conn.execute(_SETTLE_AND_RECORD, params)


async def job_settle_driver(
    driver: Any,
    settlements: Sequence[Settlement],
    now: datetime,
    fence: tuple[str, str, int, datetime] | None = None,
) -> Any:
    """``job_settle`` on an asyncpg connection, inside its open transaction. With
    ``fence`` (queue, owner, token, new expiry) the lease fence goes with it: returns
    the queue's row (paused, forbidden flags), None if the fence matched none."""
    params = _settle_params(settlements, now)
    records = [s.record for s in settlements if s.record is not None]
    if records:
        params.update(_record_params(records))
    if fence is None:
        plain = _SETTLE_AND_RECORD_RAW if records else _SETTLE_RAW
        return await driver.execute(plain.sql, *plain.arguments(params))
    fenced = _SETTLE_AND_RECORD_FENCED_RAW if records else _SETTLE_FENCED_RAW
    params.update(f_queue=fence[0], f_owner=fence[1], f_token=fence[2], f_expires=fence[3])
    return await driver.fetchrow(fenced.sql, *fenced.arguments(params))


def _settle_params(settlements: Sequence[Settlement], now: datetime) -> dict[str, Any]:
    return {
        "now": now,
        "ids": [s.job_id for s in settlements],
        "attempts": [s.attempt for s in settlements],
        "states": [s.state.value for s in settlements],
        "run_ats": [s.run_at for s in settlements],
        "payloads": [json_dumps(s.payload) for s in settlements],
        "finished": [s.finished_at for s in settlements],
        "results": [_json_or_null(s.result) for s in settlements],
        "errors": [s.last_error for s in settlements],
    }


def _record_params(records: Sequence[Attempt]) -> dict[str, Any]:
    return {
        "r_job_ids": [r.job_id for r in records],
        "r_attempts": [r.attempt for r in records],
        "r_started": [r.started_at for r in records],
        "r_finished": [r.finished_at for r in records],
        "r_outcomes": [r.outcome for r in records],
        "r_errors": [r.error for r in records],
        "r_responses": [_json_or_null(r.response) for r in records],
    }


_INSERT_JOBS = text(
    """
    INSERT INTO hipq_jobs (queue, type, state, payload, labels, windows, retry, run_at,
                           priority, weight, timeout_seconds, critical, correlation_key,
                           job_key, flags, attempt, created_at, updated_at, cancel_requested,
                           trace_context, notify)
    SELECT u.queue, u.type, 'scheduled', u.payload::jsonb, u.labels::jsonb, u.windows::jsonb,
           u.retry::jsonb, u.run_at, u.priority, u.weight, u.timeout_seconds, u.critical,
           u.correlation_key, u.job_key, u.flags::jsonb, 0, :now, :now, false, u.trace_context,
           u.notify::jsonb
    FROM unnest(CAST(:queues AS text[]), CAST(:types AS text[]), CAST(:payloads AS text[]),
                CAST(:labels AS text[]), CAST(:windows AS text[]), CAST(:retries AS text[]),
                CAST(:run_ats AS timestamptz[]), CAST(:priorities AS integer[]),
                CAST(:weights AS integer[]), CAST(:timeouts AS float8[]),
                CAST(:criticals AS boolean[]), CAST(:correlation_keys AS text[]),
                CAST(:job_keys AS text[]), CAST(:flags AS text[]),
                CAST(:trace_contexts AS text[]), CAST(:notifies AS text[])) WITH ORDINALITY
         AS u(queue, type, payload, labels, windows, retry, run_at, priority, weight,
              timeout_seconds, critical, correlation_key, job_key, flags, trace_context, notify,
              ord)
    ORDER BY u.ord
    RETURNING id
    """
)


# The same insert and its wake-ups as one statement, for a connection in autocommit:
# one round trip where BEGIN, INSERT, NOTIFY and COMMIT took four. A data-modifying
# WITH always runs; ``sent`` is joined so that the NOTIFYs run too (delivered at commit).
_INSERT_JOBS_NOTIFY = text(
    "WITH ins AS (" + _INSERT_JOBS.text + "), "
    "sent AS (SELECT count(pg_notify(:channel, p)) AS n "
    "FROM unnest(CAST(:notices AS text[])) AS p) "
    "SELECT ins.id FROM ins, sent"
)
# Run on the driver connection: the single-job POST's one statement (``hipq.store.driver``).
_INSERT_JOBS_NOTIFY_DRIVER = DriverStatement(_INSERT_JOBS_NOTIFY)


async def job_insert_rows(conn: AsyncConnection, rows: list[dict[str, Any]]) -> list[int]:
    """Insert job rows in one statement; their ids in the order given.

    The ids come from the table's sequence, drawn row by row in ``ord`` order, so
    they increase in the order given: sorting what RETURNING yields restores it.
    """
    result = await conn.execute(_INSERT_JOBS, _insert_params(rows))
    return sorted(result.scalars().all())


async def job_insert_rows_notify(
    conn: AsyncConnection, rows: list[dict[str, Any]], channel: str, notices: list[str]
) -> list[int]:
    """``job_insert_rows`` and the NOTIFY of ``notices`` in one statement."""
    params = {**_insert_params(rows), "channel": channel, "notices": notices}
    return sorted(row[0] for row in await _INSERT_JOBS_NOTIFY_DRIVER.fetch(conn, params))


def _insert_params(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "now": rows[0]["created_at"],
        "queues": [r["queue"] for r in rows],
        "types": [r["type"] for r in rows],
        "payloads": [json_dumps(r["payload"]) for r in rows],
        "labels": [json_dumps(r["labels"]) for r in rows],
        "windows": [_json_or_null(r["windows"]) for r in rows],
        "retries": [json_dumps(r["retry"]) for r in rows],
        "run_ats": [r["run_at"] for r in rows],
        "priorities": [r["priority"] for r in rows],
        "weights": [r["weight"] for r in rows],
        "timeouts": [r["timeout_seconds"] for r in rows],
        "criticals": [r["critical"] for r in rows],
        "correlation_keys": [r["correlation_key"] for r in rows],
        "job_keys": [r["job_key"] for r in rows],
        "flags": [_json_or_null(r["flags"]) for r in rows],
        "trace_contexts": [r["trace_context"] for r in rows],
        "notifies": [_json_or_null(r["notify"]) for r in rows],
    }


# Pending responses (webhooks, Kafka) and their wake-up as one autocommit statement, as
# the jobs' insert above: one round trip where BEGIN, INSERT, NOTIFY and COMMIT took
# four. JSON travels as text: None as JSON null, as SQLAlchemy's JSON type stores it.
_INSERT_RESPONSES_NOTIFY = DriverStatement(
    text(
        """
        WITH ins AS (
            INSERT INTO hipq_responses (correlation_key, source, received_at, expires_at,
                                        succeeded, reason, body, headers, job_type, status,
                                        fingerprint)
            SELECT u.correlation_key, u.source, :received_at, :expires_at, u.succeeded,
                   u.reason, u.body::jsonb, u.headers::jsonb, u.job_type, 'pending',
                   u.fingerprint
            FROM unnest(CAST(:keys AS text[]), CAST(:sources AS text[]),
                        CAST(:succeeded AS boolean[]), CAST(:reasons AS text[]),
                        CAST(:bodies AS text[]), CAST(:headers AS text[]),
                        CAST(:job_types AS text[]), CAST(:fingerprints AS text[]))
                 WITH ORDINALITY
                 AS u(correlation_key, source, succeeded, reason, body, headers, job_type,
                      fingerprint, ord)
            ORDER BY u.ord
            RETURNING id
        ), sent AS (SELECT pg_notify(:channel, :payload) AS n)
        SELECT ins.id FROM ins, sent
        """
    )
)


async def response_insert_rows_notify(
    conn: AsyncConnection, rows: list[dict[str, Any]], channel: str, payload: str
) -> list[int]:
    """Insert pending response rows and NOTIFY ``payload``, in one statement; their
    ids in the order given (drawn from the sequence in ``ord`` order)."""
    params = {
        "received_at": rows[0]["received_at"],
        "expires_at": rows[0]["expires_at"],
        "keys": [r["correlation_key"] for r in rows],
        "sources": [r["source"] for r in rows],
        "succeeded": [r["succeeded"] for r in rows],
        "reasons": [r["reason"] for r in rows],
        "bodies": [json_dumps(r["body"]) for r in rows],
        "headers": [json_dumps(r["headers"]) for r in rows],
        "job_types": [r["job_type"] for r in rows],
        "fingerprints": [r["fingerprint"] for r in rows],
        "channel": channel,
        "payload": payload,
    }
    return sorted(row[0] for row in await _INSERT_RESPONSES_NOTIFY.fetch(conn, params))
