"""The batches table (hipq.batches): made, joined and sealed with their jobs, read by
the API and the dashboard. Its counts move with its jobs' states by a trigger on
hipq_jobs (alembic 0022), and what it does when it finishes is a trigger on this
table (alembic 0024), not here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, case, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.batches import Batch, NewBatch, waiting_reason
from hipq.dependencies import AFTER_PARKED
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.store.records import BadReference, Conflict, NotFound
from hipq.store.rows import row_to_job
from hipq.store.schema import batches, jobs
from hipq.store.transactions import Transactions

_FIELDS = tuple(f.name for f in fields(Batch))
# Ids per statement of a join's update (SQLite limits a statement's parameters).
_CHUNK = 500
_COUNTED = (State.COMPLETED.value, State.FAILED.value, State.CANCELLED.value)


def batch_from(row: Any) -> Batch:
    return Batch(**{name: getattr(row, name) for name in _FIELDS})


def seen_by(owner: str | None) -> ColumnElement[bool]:
    """The batches a caller may name: a tenant's own (``owner``, a restricted token's
    name), every one for an unrestricted caller (None). Another tenant's batch is then
    answered exactly as one that does not exist."""
    return true() if owner is None else batches.c.owner == owner


async def batch_create(conn: AsyncConnection, new: NewBatch, now: datetime) -> int:
    """An open batch without jobs; its completion job is added by the caller."""
    stmt = (
        batches.insert()
        .values(
            total=0,
            completed=0,
            failed=0,
            cancelled=0,
            on_complete=new.completion.type if new.completion else None,
            notify=new.notify,
            created_at=now,
            owner=new.owner,
        )
        .returning(batches.c.id)
    )
    return int((await conn.execute(stmt)).scalar_one())


async def batch_set_completion(
    conn: AsyncConnection, batch_id: int, job: Job, now: datetime
) -> None:
    """``job`` becomes the batch's completion job: it waits for the batch to finish
    (released by the trigger that finishes it), its own run_at kept aside."""
    await conn.execute(
        update(jobs)
        .where(jobs.c.id == job.id)
        .values(
            run_at=AFTER_PARKED,
            after_run_at=job.run_at,
            waiting_for=1,
            waiting_reason=waiting_reason(batch_id),
            updated_at=now,
        )
    )
    await conn.execute(
        update(batches).where(batches.c.id == batch_id).values(completion_job_id=job.id)
    )


async def batch_join(
    conn: AsyncConnection,
    batch_id: int,
    made: Sequence[Job],
    field: str,
    stored: int = 0,
    owner: str | None = None,
) -> list[Job]:
    """Put ``made`` (jobs just stored, or found by their job_key) in the batch and
    count them; a job already in a batch stays in its own. ``made`` as they are now.
    ``stored``: jobs the caller stored with the batch's id, added to its total only.
    ``owner``: the tenant the jobs are added for; another tenant's batch is refused
    as one that does not exist (``seen_by``).

    The jobs' rows are taken before the batch's row, in the order a job's end takes
    them (its row, then its trigger's update of the batch), so that a join and the
    end of the batch's last job never wait for each other in a circle. The guarded
    update of the batch then orders the two: a batch that finished first refuses the
    join (and the request is rolled back), else the new jobs count before any end is
    compared with the total.
    """
    ids = list(dict.fromkeys(j.id for j in made))
    states: dict[int, str] = {}
    for start in range(0, len(ids), _CHUNK):  # none for a batch POST's own new jobs
        chunk = ids[start : start + _CHUNK]
        joined = await conn.execute(
            update(jobs)
            .where(jobs.c.id.in_(chunk), jobs.c.batch_id.is_(None))
            .values(batch_id=batch_id)
            .returning(jobs.c.id, jobs.c.state)
        )
        states.update((r.id, r.state) for r in joined)
    moved = {s: sum(1 for x in states.values() if x == s) for s in _COUNTED}
    counted = await conn.execute(
        update(batches)
        .where(batches.c.id == batch_id, batches.c.finished_at.is_(None), seen_by(owner))
        .values(
            total=batches.c.total + stored + len(states),
            **{s: getattr(batches.c, s) + n for s, n in moved.items()},
        )
        .returning(batches.c.id)
    )
    if counted.first() is None:
        await _refuse_join(conn, batch_id, field, owner)
    # A job another batch took meanwhile (found by its job_key) is answered as it is.
    return [j._replace(batch_id=batch_id) if j.id in states else j for j in made]


async def _refuse_join(conn: AsyncConnection, batch_id: int, field: str, owner: str | None) -> None:
    query = select(batches.c.finished_at).where(batches.c.id == batch_id, seen_by(owner))
    found = (await conn.execute(query)).first()
    if found is None:
        raise BadReference(f"batch {batch_id} does not exist", field)
    raise Conflict(
        f"batch {batch_id} finished at {found.finished_at.isoformat()} (its completion and "
        "notifications fired): add the jobs to a new batch",
        field=field,
    )


async def batch_seal(
    conn: AsyncConnection, batch_id: int, now: datetime, owner: str | None = None
) -> bool:
    """Seal an open batch: it finishes now if none of its jobs is pending (the trigger
    on hipq_batches then does what a finish does), else when the last one ends. False
    when it was sealed already (or does not exist, or ``owner`` may not name it)."""
    done = batches.c.completed + batches.c.failed + batches.c.cancelled >= batches.c.total
    sealed = await conn.execute(
        update(batches)
        .where(batches.c.id == batch_id, batches.c.sealed_at.is_(None), seen_by(owner))
        .values(sealed_at=now, finished_at=case((done, now), else_=None))
        .returning(batches.c.id)
    )
    return sealed.first() is not None


class BatchTable(Transactions):
    async def batch_get(self, batch_id: int, owner: str | None = None) -> Batch:
        """The batch, if ``owner`` may name it (``seen_by``)."""
        query = select(batches).where(batches.c.id == batch_id, seen_by(owner))
        async with self._read() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            raise NotFound(f"batch {batch_id} does not exist")
        return batch_from(row)

    async def batch_unseen(self, batch_ids: Sequence[int], owner: str | None) -> int | None:
        """The first of ``batch_ids`` that ``owner`` may not name (another tenant's, or
        none at all); None if it may name them all. A batch's owner never changes, so
        what this finds holds when the jobs join in a later transaction."""
        wanted = sorted(set(batch_ids))
        if owner is None or not wanted:
            return None
        query = select(batches.c.id).where(batches.c.id.in_(wanted), seen_by(owner))
        async with self._read() as conn:
            found = {r.id for r in await conn.execute(query)}
        return next((i for i in wanted if i not in found), None)

    async def batch_list(self, before_id: int | None, limit: int) -> list[Batch]:
        """Batches newest first, those older than ``before_id`` (a page's cursor)."""
        query = select(batches).order_by(batches.c.id.desc()).limit(limit)
        if before_id is not None:
            query = query.where(batches.c.id < before_id)
        async with self._read() as conn:
            return [batch_from(r) for r in await conn.execute(query)]

    async def batch_seal_now(self, batch_id: int, now: datetime, owner: str | None = None) -> Batch:
        """Seal the batch (nothing changes if it was sealed already); as it is then.
        Another tenant's batch (``seen_by``) is neither sealed nor found."""
        async with self._write() as conn:
            await batch_seal(conn, batch_id, now, owner)
            query = select(batches).where(batches.c.id == batch_id, seen_by(owner))
            row = (await conn.execute(query)).first()
        if row is None:
            raise NotFound(f"batch {batch_id} does not exist")
        return batch_from(row)

    async def batch_jobs(self, batch_id: int, before_id: int | None, limit: int) -> list[Job]:
        """A page of the batch's jobs, newest first, those older than ``before_id``
        (the index on (batch_id, id) reads just the page)."""
        query = select(jobs).where(jobs.c.batch_id == batch_id)
        if before_id is not None:
            query = query.where(jobs.c.id < before_id)
        query = query.order_by(jobs.c.id.desc()).limit(limit)
        async with self._read() as conn:
            return [row_to_job(r) for r in await conn.execute(query)]
