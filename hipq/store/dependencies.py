"""Storing a job's ``after`` (hipq.dependencies): its prerequisites found and locked,
its dependency rows, and the job parked until they finish (or cancelled at once
when one already failed)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.dependencies import AFTER_PARKED, job_field, waiting_reason
from hipq.jobs import Job
from hipq.lifecycle import TERMINAL, State
from hipq.store.dialects import Dialect
from hipq.store.records import BadReference
from hipq.store.schema import job_dependencies, jobs


async def prerequisites(
    conn: AsyncConnection,
    dialect: Dialect,
    refs: dict[int, int | str],
    index: int,
    count: int,
    tenant: str = "",
) -> dict[int, tuple[int, str]]:
    """Per position in ``after``, the (id, state) of the stored job it names, locked
    so that it cannot finish before the dependency row is committed (its trigger
    would not count a row it cannot see). Raises ``BadReference`` for an unknown one.

    Only ``tenant``'s jobs are named: a key within it, an id of its jobs (the
    service, '', names any job by id); another tenant's job answers as an absent one."""
    ids = [r for r in refs.values() if isinstance(r, int)]
    keys = [r for r in refs.values() if isinstance(r, str)]
    by_id: dict[int, str] = {}
    by_key: dict[str, tuple[int, str]] = {}
    if ids:
        query = select(jobs.c.id, jobs.c.state).where(jobs.c.id.in_(ids))
        if tenant:
            query = query.where(jobs.c.tenant == tenant)
        by_id = {r.id: r.state for r in await conn.execute(dialect.for_update(query))}
    if keys:
        # The newest job holding each key (an open one holds it alone, and is the newest).
        keyed = (
            select(jobs.c.id, jobs.c.state, jobs.c.job_key)
            .where(jobs.c.job_key.in_(keys), jobs.c.tenant == tenant)
            .order_by(jobs.c.id)
        )
        for r in await conn.execute(dialect.for_update(keyed)):
            by_key[r.job_key] = (r.id, r.state)
    found: dict[int, tuple[int, str]] = {}
    for k, ref in refs.items():
        hit = (ref, by_id[ref]) if isinstance(ref, int) and ref in by_id else None
        if isinstance(ref, str):
            hit = by_key.get(ref)
        if hit is None:
            what = f"job {ref}" if isinstance(ref, int) else f"job_key {ref!r}"
            raise BadReference(f"{what} does not exist", job_field(index, count, f"after[{k}]"))
        found[k] = hit
    return found


async def park(
    conn: AsyncConnection,
    dialect: Dialect,
    job: Job,
    after: Sequence[tuple[int, str]],
    after_failed: str,
    now: datetime,
) -> None:
    """Record that ``job`` (just stored) runs after ``after`` (id, state) and make it
    wait for the unfinished ones; cancel it now if one already failed and it says so."""
    if not after:
        return
    rows = [
        {"job_id": job.id, "after_id": i, "outcome": state if state in TERMINAL else None}
        for i, state in after
    ]
    await conn.execute(dialect.insert(job_dependencies).values(rows).on_conflict_do_nothing())
    unfinished = [i for i, state in after if state not in TERMINAL]
    if unfinished:  # their settle's trigger looks for this job (alembic 0022)
        await conn.execute(
            update(jobs).where(jobs.c.id.in_(unfinished)).values(has_dependents=True)
        )
    failed = [(i, s) for i, s in after if s in (State.FAILED, State.CANCELLED)]
    changes: dict[str, Any] = {}
    if failed and after_failed == "cancel":
        changes = {
            "state": State.CANCELLED.value,
            "last_error": f"job {failed[0][0]} it runs after was {failed[0][1]}",
            "finished_at": now,
            "waiting_for": 0,
        }
    elif unfinished:
        changes = {
            "run_at": AFTER_PARKED,
            "after_run_at": job.run_at,
            "waiting_for": len(unfinished),
            "waiting_reason": waiting_reason(unfinished, after_failed),
        }
    if changes:
        await conn.execute(
            update(jobs)
            .where(jobs.c.id == job.id, jobs.c.state == State.SCHEDULED.value)
            .values(**changes, updated_at=now)
        )
