"""The loop's side of requests about jobs in flight, inside the tick's transaction:
operators' requests (``hipq.operator_requests``), read and finished once the jobs are
settled; snoozes (a job that asked to wait), whose attempt is given back; and the
retry settings a job_key takeover changed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from hipq.operator_requests import OperatorRequest
from hipq.outcomes import Settlement
from hipq.store.batch import QueueBatch
from hipq.store.schema import jobs
from hipq.store.state_guards import IN_FLIGHT_SQL, SCHEDULED_SQL

Requests = Mapping[int, OperatorRequest]


async def requests_pending(batch: QueueBatch) -> dict[int, OperatorRequest]:
    """The requests waiting for the queue's in-flight jobs, by job id."""
    rows = await batch.conn.execute(
        select(jobs.c.id, jobs.c.operator_request).where(
            jobs.c.queue == batch.queue,
            jobs.c.cancel_requested.is_(True),
            jobs.c.state.in_(IN_FLIGHT_SQL),
        )
    )
    return {r.id: OperatorRequest.from_json(r.operator_request) for r in rows}


async def requests_finish(
    batch: QueueBatch,
    requests: Requests,
    settled: Iterable[Settlement],
    retries: Mapping[int, dict[str, Any]],
    now: datetime,
) -> None:
    """The settled jobs' requests are done: forget them, and give a rescheduled job
    what its reschedule changes besides run_at (priority, attempts, max_attempts)."""
    done = [s.job_id for s in settled if s.job_id in requests]
    if not done:
        return
    await batch.conn.execute(
        update(jobs).where(jobs.c.id.in_(done)).values(operator_request=None, updated_at=now)
    )
    for job_id in done:  # rare: one statement each
        reschedule = requests[job_id].reschedule
        # Checked when requested; the job's retry may have changed since (strict=False).
        columns = reschedule.columns(retries.get(job_id, {}), strict=False) if reschedule else {}
        if columns:
            await batch.conn.execute(
                update(jobs)
                .where(jobs.c.id == job_id, jobs.c.state == SCHEDULED_SQL)
                .values(columns)
            )


async def retry_settings(batch: QueueBatch, job_ids: list[int]) -> dict[int, dict[str, Any]]:
    """The jobs' retry settings as stored now: they may have changed while the job was
    in flight (its job_key taken over by a new job)."""
    if not job_ids:
        return {}
    rows = await batch.conn.execute(select(jobs.c.id, jobs.c.retry).where(jobs.c.id.in_(job_ids)))
    return {r.id: r.retry for r in rows}


async def attempts_give_back(batch: QueueBatch, settled: Iterable[Settlement]) -> None:
    """Snoozed jobs did not spend their attempt: the next run is the same attempt."""
    snoozed = [s.job_id for s in settled if not s.attempt_spent]
    if snoozed:
        await batch.conn.execute(
            update(jobs)
            .where(jobs.c.id.in_(snoozed), jobs.c.state == SCHEDULED_SQL, jobs.c.attempt > 0)
            .values(attempt=jobs.c.attempt - 1)
        )
