"""Storing a job's ``after`` (hipq.dependencies): its prerequisites found and locked,
its dependency rows, and the jobs parked until they finish (or cancelled at once when
one already failed), for a whole request at a time; the refusal of a wait that would
close a cycle; and the waits a job takes up again when it is scheduled anew."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.batches import waiting_reason as batch_waiting_reason
from hipq.dependencies import AFTER_PARKED, job_field, waiting_reason
from hipq.jobs import Job
from hipq.lifecycle import TERMINAL, State
from hipq.store.dialects import Dialect
from hipq.store.records import BadReference
from hipq.store.schema import batches, job_dependencies, jobs

# Rows or ids per statement (SQLite limits a statement's parameters).
CHUNK = 500

# A reference of a request's job to a stored job: (job's index, position in its after).
Place = tuple[int, int]


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


async def prerequisites(
    conn: AsyncConnection,
    dialect: Dialect,
    refs: dict[Place, int | str],
    order: Sequence[int],
    count: int,
    tenant: str = "",
) -> dict[Place, tuple[int, str]]:
    """Per reference, the (id, state) of the stored job it names, every one locked so
    that none can finish before the dependency rows are committed (its trigger would
    not count a row it cannot see). Ids and keys are each read in one statement per
    ``CHUNK``, however many jobs name them. Raises ``BadReference`` for an unknown one,
    naming the first job of ``order`` (the insert's) that names one.

    Only ``tenant``'s jobs are named: a key within it, an id of its jobs (the
    service, '', names any job by id); another tenant's job answers as an absent one."""
    ids = sorted({r for r in refs.values() if isinstance(r, int)})
    keys = sorted({r for r in refs.values() if isinstance(r, str)})
    by_id: dict[int, str] = {}
    by_key: dict[str, tuple[int, str]] = {}
    for part in _chunks(ids):
        query = select(jobs.c.id, jobs.c.state).where(jobs.c.id.in_(part)).order_by(jobs.c.id)
        if tenant:
            query = query.where(jobs.c.tenant == tenant)
        by_id.update((r.id, r.state) for r in await conn.execute(dialect.for_update(query)))
    for part in _chunks(keys):
        # The newest job holding each key (an open one holds it alone, and is the newest).
        keyed = (
            select(jobs.c.id, jobs.c.state, jobs.c.job_key)
            .where(jobs.c.job_key.in_(part), jobs.c.tenant == tenant)
            .order_by(jobs.c.id)
        )
        for r in await conn.execute(dialect.for_update(keyed)):
            by_key[r.job_key] = (r.id, r.state)
    found: dict[Place, tuple[int, str]] = {}
    rank = {i: n for n, i in enumerate(order)}
    for place in sorted(refs, key=lambda p: (rank[p[0]], p[1])):
        ref = refs[place]
        hit = (ref, by_id[ref]) if isinstance(ref, int) and ref in by_id else None
        if isinstance(ref, str):
            hit = by_key.get(ref)
        if hit is None:
            what = f"job {ref}" if isinstance(ref, int) else f"job_key {ref!r}"
            field = job_field(place[0], count, f"after[{place[1]}]")
            raise BadReference(f"{what} does not exist", field)
        found[place] = hit
    return found


async def park(
    conn: AsyncConnection,
    dialect: Dialect,
    waits: Sequence[tuple[Job, Sequence[tuple[int, str]], str]],
    now: datetime,
) -> dict[int, State]:
    """Record that each job (just stored) runs after its (id, state) pairs and make it
    wait for the unfinished ones; cancel it now if one already failed and it says so.
    One statement per ``CHUNK`` of rows, and per group of jobs parked alike. The
    state of each job it cancelled."""
    rows = [
        {"job_id": job.id, "after_id": i, "outcome": state if state in TERMINAL else None}
        for job, after, _ in waits
        for i, state in after
    ]
    if rows:  # one statement, its rows sent as a batch (compiled once, not per chunk)
        await conn.execute(dialect.insert(job_dependencies).on_conflict_do_nothing(), rows)
    prerequisites = sorted({i for _, after, _ in waits for i, s in after if s not in TERMINAL})
    for part in _chunks(prerequisites):  # their settle's trigger looks for these jobs
        await conn.execute(update(jobs).where(jobs.c.id.in_(part)).values(has_dependents=True))
    cancels: dict[str, list[int]] = defaultdict(list)
    parks: dict[tuple[int, str], list[int]] = defaultdict(list)
    for job, after, after_failed in waits:
        failed = [(i, s) for i, s in after if s in (State.FAILED, State.CANCELLED)]
        unfinished = [i for i, state in after if state not in TERMINAL]
        if failed and after_failed == "cancel":
            cancels[f"job {failed[0][0]} it runs after was {failed[0][1]}"].append(job.id)
        elif unfinished:
            parks[(len(unfinished), waiting_reason(unfinished, after_failed))].append(job.id)
    scheduled = jobs.c.state == State.SCHEDULED.value
    for last_error, ids in cancels.items():
        for part in _chunks(ids):
            await conn.execute(
                update(jobs)
                .where(jobs.c.id.in_(part), scheduled)
                .values(
                    state=State.CANCELLED.value,
                    last_error=last_error,
                    finished_at=now,
                    waiting_for=0,
                    updated_at=now,
                )
            )
    # Its own run_at kept aside (that of a job already parked stays aside).
    own_run_at = case((jobs.c.run_at == AFTER_PARKED, jobs.c.after_run_at), else_=jobs.c.run_at)
    for (waiting_for, reason), ids in parks.items():
        for part in _chunks(ids):
            await conn.execute(
                update(jobs)
                .where(jobs.c.id.in_(part), scheduled)
                .values(
                    run_at=AFTER_PARKED,
                    after_run_at=own_run_at,
                    waiting_for=waiting_for,
                    waiting_reason=reason,
                    updated_at=now,
                )
            )
    return {i: State.CANCELLED for ids in cancels.values() for i in ids}


# Whether a job waits for itself through the waits stored: what it runs after (its
# dependency rows whose prerequisite has not ended), and for a batch's completion job
# every job of its unfinished batch, followed to their own, at any depth. The rows of a
# job that ended count too: an operator may schedule it again, and it then waits again.
_WAITS_SQLITE = """
WITH RECURSIVE walk(id, far) AS (
  SELECT :job, 0
  UNION
  SELECT d.after_id, 1 FROM walk w JOIN hipq_job_dependencies d ON d.job_id = w.id
    WHERE d.outcome IS NULL
  UNION
  SELECT j.id, 1 FROM walk w JOIN hipq_batches b ON b.completion_job_id = w.id
    JOIN hipq_jobs j ON j.batch_id = b.id WHERE b.finished_at IS NULL
)
SELECT 1 FROM walk WHERE id = :job AND far = 1 LIMIT 1
"""
# PostgreSQL takes one recursive reference: both steps in one LATERAL subquery per job
# of a round, read by the indexes (a recursive step is planned once, however few rows
# each round has).
_WAITS_PG = """
WITH RECURSIVE walk(id, far) AS (
  SELECT CAST(:job AS bigint), 0
  UNION
  SELECT n.id, 1 FROM walk w CROSS JOIN LATERAL (
    SELECT d.after_id AS id FROM hipq_job_dependencies d
      WHERE d.job_id = w.id AND d.outcome IS NULL
    UNION ALL
    SELECT j.id FROM hipq_batches b JOIN hipq_jobs j ON j.batch_id = b.id
      WHERE b.completion_job_id = w.id AND b.finished_at IS NULL
    OFFSET 0
  ) AS n
)
SELECT 1 FROM walk WHERE id = :job AND far = 1 LIMIT 1
"""


async def refuse_cycle(
    conn: AsyncConnection, dialect: Dialect, job_id: int, field: str, how: str
) -> None:
    """Raise ``BadReference`` (naming ``field``) if ``job_id`` now waits for itself;
    ``how``: that job, for the message."""
    walk = _WAITS_PG if dialect.name == "postgresql" else _WAITS_SQLITE
    if (await conn.execute(text(walk), {"job": job_id})).first() is not None:
        raise BadReference(f"a cycle: {how} would wait for itself", field)


async def wait_again(conn: AsyncConnection, job_ids: Sequence[int], now: datetime) -> None:
    """The jobs of ``job_ids`` just scheduled again (a reschedule, a retry) wait for
    what they still wait for: their prerequisites that have not ended, and for a
    completion job its unfinished batch. Such a job is parked again, its new run_at
    kept aside; one that waits for nothing any more is due at that run_at."""
    for part in _chunks(list(job_ids)):
        found = await conn.execute(
            select(jobs.c.id, jobs.c.after_failed, jobs.c.waiting_for).where(
                jobs.c.id.in_(part),
                jobs.c.state == State.SCHEDULED.value,
                (jobs.c.after.is_not(None)) | (func.coalesce(jobs.c.waiting_for, 0) != 0),
            )
        )
        candidates = {r.id: r for r in found}
        if not candidates:
            continue
        pending: dict[int, list[int]] = defaultdict(list)
        rows = await conn.execute(
            select(job_dependencies.c.job_id, job_dependencies.c.after_id)
            .where(
                job_dependencies.c.job_id.in_(list(candidates)),
                job_dependencies.c.outcome.is_(None),
            )
            .order_by(job_dependencies.c.job_id, job_dependencies.c.after_id)
        )
        for r in rows:
            pending[r.job_id].append(r.after_id)
        batch_of = dict(
            (
                await conn.execute(
                    select(batches.c.completion_job_id, batches.c.id).where(
                        batches.c.completion_job_id.in_(list(candidates)),
                        batches.c.finished_at.is_(None),
                    )
                )
            ).all()
        )
        waits: dict[tuple[int, str | None], list[int]] = defaultdict(list)
        for job_id, row in candidates.items():
            after = pending.get(job_id, [])
            count = len(after) + (1 if job_id in batch_of else 0)
            if after:
                reason: str | None = waiting_reason(after, row.after_failed or "cancel")
            elif job_id in batch_of:
                reason = batch_waiting_reason(batch_of[job_id])
            else:
                reason = None
            if count or row.waiting_for:
                waits[(count, reason)].append(job_id)
        for (count, reason), ids in waits.items():
            values: dict[str, Any] = {"waiting_for": count, "updated_at": now}
            if count:  # its own run_at kept aside (SET reads the row as it was)
                values.update(
                    run_at=AFTER_PARKED, after_run_at=jobs.c.run_at, waiting_reason=reason
                )
            scheduled = and_(jobs.c.id.in_(ids), jobs.c.state == State.SCHEDULED.value)
            await conn.execute(update(jobs).where(scheduled).values(values))
