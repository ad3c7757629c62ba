"""Heartbeats of external jobs: the API records the last one of an attempt, the
queue's loop takes the pending ones inside its tick (it alone moves deadlines).

A heartbeat names its job by correlation key, as the callback does; only a job in
flight (running or awaiting) can take one. The row keeps the attempt it was for,
so that a heartbeat that raced a retry never moves the next attempt's deadline.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, bindparam, case, delete, null, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.store.batch import QueueBatch
from hipq.store.jobs import chunked_rows
from hipq.store.records import Conflict, NotFound
from hipq.store.schema import heartbeat_messages, job_heartbeats, jobs
from hipq.store.state_guards import OPEN_SQL
from hipq.store.transactions import Transactions
from hipq.store.wakeup import cancels_payload


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The last heartbeat of a job's attempt, as stored."""

    job_id: int
    queue: str
    attempt: int
    beat_at: datetime
    deadline: datetime
    progress: Any
    # The payload the attempt's retries start from, sent with it and not yet taken.
    checkpoint: dict[str, Any] | None = None


# A heartbeat's fields, picked from a row of its table: a SQLAlchemy row or an asyncpg
# record.
_PICK = operator.itemgetter(*(job_heartbeats.c.keys().index(f.name) for f in fields(Heartbeat)))


def _heartbeat(row: Any) -> Heartbeat:
    return Heartbeat(*_PICK(row))


def heartbeats_of_query(id_in: Callable[[Any], Any]) -> Select[Any]:
    """The heartbeats of jobs by id (``hipq.store.jobs.IdIn``)."""
    return select(job_heartbeats).where(id_in(job_heartbeats.c.job_id))


def heartbeats_by_job(rows: Iterable[Any]) -> dict[int, Heartbeat]:
    return {beat.job_id: beat for beat in map(_heartbeat, rows)}


class HeartbeatTable(Transactions):
    async def heartbeat_record(
        self,
        correlation_key: str,
        job_type: str,
        progress: Any,
        now: datetime,
        timeout_seconds: float,
        keep_progress: bool = False,
        message: str | None = None,
        checkpoint: dict[str, Any] | None = None,
    ) -> tuple[Heartbeat, bool]:
        """Record a heartbeat for the open job of ``job_type`` holding ``correlation_key``:
        its deadline becomes ``now + timeout_seconds`` once its loop takes it. With
        ``keep_progress`` the last progress stays (a heartbeat that reports none).

        ``message`` is a signed heartbeat's fingerprint (of its ``webhook-id``): taken
        once per job type. ``checkpoint`` is a new payload for the attempt's retries,
        applied by the loop when it takes the heartbeat. Returns the heartbeat as
        stored, and whether it was new (False: a replay, which changes nothing and
        gets the last one)."""
        async with self._write() as conn:
            row = (
                await conn.execute(
                    select(jobs.c.id, jobs.c.queue, jobs.c.type, jobs.c.state, jobs.c.attempt)
                    .where(jobs.c.correlation_key == correlation_key, jobs.c.state.in_(OPEN_SQL))
                    .limit(1)
                )
            ).first()
            if row is None or row.type != job_type:
                raise NotFound(
                    f"no open job of type {job_type!r} has correlation key {correlation_key!r}",
                    field="key",
                )
            if row.state not in ("running", "awaiting"):
                raise Conflict(
                    f"job {row.id} is {row.state}: only a job in flight takes heartbeats",
                    field="key",
                )
            if message is not None and not await self._message_claim(conn, job_type, message, now):
                last = await read_heartbeat(conn, row.id)
                if last is None:  # its first heartbeat was for a job since retried
                    raise Conflict("this signed heartbeat was taken already", field="webhook-id")
                return last, False
            beat = Heartbeat(
                row.id,
                row.queue,
                row.attempt,
                now,
                now + timedelta(seconds=timeout_seconds),
                progress,
                checkpoint,
            )
            values: dict[str, Any] = {
                "queue": beat.queue,
                "attempt": beat.attempt,
                "beat_at": beat.beat_at,
                "deadline": beat.deadline,
                "progress": beat.progress,
                "checkpoint": beat.checkpoint,
                "pending": True,
            }
            upsert = self.dialect.insert(job_heartbeats).values(job_id=beat.job_id, **values)
            if keep_progress:
                del values["progress"]
            if checkpoint is None:
                # A heartbeat without one keeps a checkpoint not yet taken, of this
                # attempt only: one sent for an attempt since retried is dropped.
                values["checkpoint"] = case(
                    (job_heartbeats.c.attempt == beat.attempt, job_heartbeats.c.checkpoint),
                    else_=null(),
                )
            stored = await conn.execute(
                upsert.on_conflict_do_update(
                    index_elements=[job_heartbeats.c.job_id], set_=values
                ).returning(job_heartbeats.c.progress, job_heartbeats.c.checkpoint)
            )
            kept = stored.one()
            beat = replace(beat, progress=kept.progress, checkpoint=kept.checkpoint)
            # The loop reads heartbeats where it reads cancel requests: news of a job
            # in flight, looked for on a hint and at least every few seconds.
            await self._notify(conn, {cancels_payload(beat.queue)})
        return beat, True

    async def heartbeat_messages_prune(self, before: datetime) -> int:
        """Forget the signed heartbeats taken before ``before``; how many."""
        async with self._write() as conn:
            done = await conn.execute(
                delete(heartbeat_messages).where(heartbeat_messages.c.received_at < before)
            )
        return done.rowcount or 0

    async def heartbeat_message_taken(self, job_type: str, message: str, since: datetime) -> bool:
        """Whether a signed heartbeat of ``job_type`` with ``message`` (its fingerprint)
        was taken since ``since``: the same message posted as a callback is refused."""
        query = select(heartbeat_messages.c.fingerprint).where(
            heartbeat_messages.c.job_type == job_type,
            heartbeat_messages.c.fingerprint == message,
            heartbeat_messages.c.received_at >= since,
        )
        async with self._read() as conn:
            return (await conn.execute(query)).first() is not None

    async def _message_claim(
        self, conn: AsyncConnection, job_type: str, message: str, now: datetime
    ) -> bool:
        """Claim a signed heartbeat's message for ``job_type``; False if it was before."""
        claim = (
            self.dialect.insert(heartbeat_messages)
            .values(job_type=job_type, fingerprint=message, received_at=now)
            .on_conflict_do_nothing()
            .returning(heartbeat_messages.c.fingerprint)
        )
        return (await conn.execute(claim)).first() is not None


async def read_heartbeat(conn: AsyncConnection, job_id: int) -> Heartbeat | None:
    return (await read_heartbeats_of(conn, [job_id])).get(job_id)


async def read_heartbeats_of(conn: AsyncConnection, job_ids: Sequence[int]) -> dict[int, Heartbeat]:
    """The last heartbeat of each of ``job_ids`` that has one."""
    return heartbeats_by_job(await chunked_rows(conn, heartbeats_of_query, job_ids))


async def heartbeat_take(batch: QueueBatch) -> list[Heartbeat]:
    """Inside a tick: the queue's pending heartbeats, marked taken. The caller keeps
    those of its jobs in flight in the attempt they name."""
    conn = batch.conn
    rows = (
        await conn.execute(
            select(job_heartbeats).where(
                job_heartbeats.c.queue == batch.queue, job_heartbeats.c.pending.is_(True)
            )
        )
    ).all()
    if rows:
        # Only the rows read: one written since (a newer heartbeat of the same job)
        # stays pending for the next tick.
        await conn.execute(
            update(job_heartbeats)
            .where(
                job_heartbeats.c.job_id == bindparam("b_id"),
                job_heartbeats.c.beat_at == bindparam("b_at"),
            )
            .values(pending=False, checkpoint=None),
            [{"b_id": r.job_id, "b_at": r.beat_at} for r in rows],
        )
    return [_heartbeat(r) for r in rows]
