"""The queues table (pause, limits, leases, counts) and what a queue's owner reads outside
its batch: the jobs it finds in flight when it takes over, the recent starts, the
next due time. ``queue_batch`` opens the owner's one transaction per tick.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import String, case, cast, func, literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq import waiting
from hipq.jobs import Job, Start
from hipq.lifecycle import State
from hipq.store import state_guards as guards
from hipq.store.batch import QueueBatch
from hipq.store.records import LeaseLost, QueueCounts, QueueGauges
from hipq.store.rows import row_to_job
from hipq.store.schema import attempts, jobs, queues
from hipq.store.state_guards import IN_FLIGHT_SQL, IN_FLIGHT_VALUES, OPEN_VALUES, SCHEDULED_SQL
from hipq.store.statements import NEXT_RUN_AT
from hipq.store.tick import ClaimRead, DueScanOf
from hipq.store.transactions import Transactions
from hipq.store.wakeup import cancels_payload, jobs_payload


class QueueTable(Transactions):
    async def queue_counts(self, queue: str, now: datetime) -> QueueCounts:
        async with self._read() as conn:
            rows = (
                await conn.execute(
                    select(jobs.c.state, func.count(), func.coalesce(func.sum(jobs.c.weight), 0))
                    .where(
                        jobs.c.queue == queue,
                        jobs.c.state.in_([*OPEN_VALUES, State.FAILED.value]),
                    )
                    .group_by(jobs.c.state)
                )
            ).all()
            due, oldest_due_at = (
                await conn.execute(
                    select(func.count(), func.min(jobs.c.run_at)).where(
                        jobs.c.queue == queue,
                        jobs.c.state == SCHEDULED_SQL,
                        jobs.c.run_at <= now,
                    )
                )
            ).one()
            q = (await conn.execute(select(queues).where(queues.c.name == queue))).first()
        counts = {r[0]: (r[1], r[2]) for r in rows}
        live = q is not None and q.lease_expires_at is not None and q.lease_expires_at > now
        return QueueCounts(
            scheduled=counts.get("scheduled", (0, 0))[0],
            due=due,
            oldest_due_at=oldest_due_at,  # min() keeps the column's type
            running=counts.get("running", (0, 0))[0],
            awaiting=counts.get("awaiting", (0, 0))[0],
            failed=counts.get("failed", (0, 0))[0],
            weight_in_flight=sum(counts.get(s, (0, 0))[1] for s in IN_FLIGHT_VALUES),
            paused=bool(q and q.paused),
            forbidden_flags=tuple(q.forbidden_flags or ()) if q is not None else (),
            lease_owner=q.lease_owner if q is not None and live else None,
            stats=(q.stats or {}) if q is not None and live else {},
            limits=(q.limits or {}) if q is not None else {},
            limits_changed_at=q.limits_changed_at if q is not None else None,
            limits_changed_by=q.limits_changed_by if q is not None else None,
        )

    async def queue_wait_reasons(self, names: Collection[str], now: datetime) -> dict[str, str]:
        """What holds every due job of each of the queues ``names`` (paused, run by no
        live process, full: ``hipq.waiting.of_queue``), for those that have such a
        reason; one read of their rows."""
        if not names:
            return {}
        columns = (queues.c.name, queues.c.paused, queues.c.lease_expires_at, queues.c.stats)
        async with self._read() as conn:
            rows = (await conn.execute(select(*columns).where(queues.c.name.in_(names)))).all()
        found = {r.name: r for r in rows}
        reasons: dict[str, str] = {}
        for name in names:
            row = found.get(name)
            if row is None:  # no loop ever took it
                reasons[name] = waiting.NO_OWNER
                continue
            expires = row.lease_expires_at
            owned = expires is not None and expires > now
            reason = waiting.of_queue(bool(row.paused), owned, row.stats)
            if reason is not None:
                reasons[name] = reason
        return reasons

    async def queue_gauges(self, names: list[str], now: datetime) -> dict[str, QueueGauges]:
        """The jobs of the queues ``names`` by state, and how many are due, in one
        grouped read (a process's gauges, every ``metrics_interval``, not per scrape)."""
        if not names:
            return {}
        due = case((jobs.c.run_at <= now, 1), else_=0)
        async with self._read() as conn:
            rows = (
                await conn.execute(
                    select(jobs.c.queue, jobs.c.state, func.count(), func.sum(due))
                    .where(
                        jobs.c.queue.in_(names),
                        jobs.c.state.in_([*OPEN_VALUES, State.FAILED.value]),
                    )
                    .group_by(jobs.c.queue, jobs.c.state)
                )
            ).all()
        counts: dict[str, dict[str, tuple[int, int]]] = {n: {} for n in names}
        for queue, state, count, due_count in rows:
            counts[queue][state] = (count, int(due_count or 0))
        return {
            name: QueueGauges(
                backlog=by_state.get("scheduled", (0, 0))[1],
                scheduled=by_state.get("scheduled", (0, 0))[0],
                running=by_state.get("running", (0, 0))[0],
                awaiting=by_state.get("awaiting", (0, 0))[0],
                failed=by_state.get("failed", (0, 0))[0],
            )
            for name, by_state in counts.items()
        }

    async def _queue_row(self, conn: AsyncConnection, queue: str) -> None:
        await conn.execute(
            self.dialect.insert(queues)
            .values(name=queue, paused=False, lease_token=0)
            .on_conflict_do_nothing()
        )

    async def queue_set_forbidden_flags(self, queue: str, flags: list[str]) -> None:
        """The flags whose jobs wait on ``queue`` from its loop's next tick, in every
        process (the loop reads them with its lease at each tick)."""
        async with self._write() as conn:
            await self._queue_row(conn, queue)
            await conn.execute(
                update(queues)
                .where(queues.c.name == queue)
                .values(forbidden_flags=sorted(set(flags)) or None)
            )
            await self._notify(conn, {jobs_payload(queue)})

    async def queue_change_limits(
        self,
        queue: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        by: str,
        now: datetime,
    ) -> dict[str, Any]:
        """Replace the queue's limit overrides with ``change(current)`` (which raises to
        refuse, writing nothing); the queue's owner applies them at its next tick."""
        async with self._write() as conn:
            await self._queue_row(conn, queue)
            # Locks the row on PostgreSQL: two changes at once do not lose one.
            current = (
                await conn.execute(
                    select(queues.c.limits).where(queues.c.name == queue).with_for_update()
                )
            ).scalar_one()
            limits = change(current or {})
            await conn.execute(
                update(queues)
                .where(queues.c.name == queue)
                .values(limits=limits or None, limits_changed_at=now, limits_changed_by=by)
            )
            # The owner looks for them with operators' requests (hipq.batch_loop.limits).
            await self._notify(conn, {cancels_payload(queue)})
        return limits

    async def queue_set_paused(self, queue: str, paused: bool) -> None:
        async with self._write() as conn:
            await self._queue_row(conn, queue)
            await conn.execute(update(queues).where(queues.c.name == queue).values(paused=paused))
            # The wake-up that reaches a paused loop (hipq.store.wakeup).
            await self._notify(conn, {cancels_payload(queue)})

    async def lease_acquire(self, queue: str, owner: str, now: datetime, ttl: float) -> int | None:
        """Take the queue's lease if it is free or expired; the new fencing token, or None."""
        async with self._write() as conn:
            await self._queue_row(conn, queue)
            stmt = (
                update(queues)
                .where(
                    queues.c.name == queue,
                    (queues.c.lease_owner.is_(None))
                    | (queues.c.lease_expires_at < now)
                    | (queues.c.lease_owner == owner),
                )
                .values(
                    lease_owner=owner,
                    lease_token=queues.c.lease_token + 1,
                    lease_expires_at=now + timedelta(seconds=ttl),
                )
                .returning(queues.c.lease_token)
            )
            return (await conn.execute(stmt)).scalar_one_or_none()

    async def lease_clear_all(self) -> None:
        """Forget every lease (only where the process guard proves no other process runs)."""
        async with self._write() as conn:
            await conn.execute(update(queues).values(lease_owner=None, lease_expires_at=None))

    async def lease_release(self, queue: str, owner: str, token: int) -> None:
        """Let go of the queue's lease, and wake the queue's loop in the other processes
        (the one whose share it now is takes it at once, not at its next attempt)."""
        async with self._write() as conn:
            released = await conn.execute(
                update(queues)
                .where(
                    queues.c.name == queue,
                    queues.c.lease_owner == owner,
                    queues.c.lease_token == token,
                )
                .values(lease_owner=None, lease_expires_at=None)
            )
            if released.rowcount:
                await self._notify(conn, {jobs_payload(queue)})

    @asynccontextmanager
    async def queue_batch(
        self,
        queue: str,
        owner: str,
        token: int,
        now: datetime,
        ttl: float,
        *,
        fence_later: bool = False,
    ) -> AsyncIterator[QueueBatch]:
        """One transaction of a queue's loop, fenced by its lease token.

        The fence is the first statement: if another process took the lease, this
        raises ``LeaseLost`` and nothing of the batch is written. On PostgreSQL the
        fence also row-locks the queue, so a takeover waits for this commit.

        ``fence_later``: the caller's first statement is the settle or the due scan;
        the fence then goes with it (on PostgreSQL in the same statement: one round
        trip for both), and ``paused`` is known after it. Any other statement sends
        the fence first.
        """
        async with self._write() as conn:
            tick = await self.dialect.tick(conn)
            fence = (owner, token, now + timedelta(seconds=ttl))
            batch = QueueBatch(conn, self.dialect, queue, False, tick, fence)
            if not fence_later:
                await batch.fence()
            yield batch
            await batch.fence()  # a tick that sent nothing still renews its lease

    async def queue_claim_due(
        self,
        queue: str,
        owner: str,
        token: int,
        now: datetime,
        ttl: float,
        *,
        limit: int,
        order: str,
        aging: float | None,
    ) -> ClaimRead | None:
        """A tick that only claims, as one statement that commits on its own where the
        dialect has one (``Dialect.claims_at_scan``; else None at once): the lease fence,
        the due scan and the claim of the due jobs that no stage of a queue without
        throttlers or capacity holds (``statements.ADMITTED_UNSEEN``). ``LeaseLost``
        if another process took the lease; nothing is written then."""
        if not self.dialect.claims_at_scan:
            return None
        scan = DueScanOf(queue, now, limit, order, aging, None)
        fence = (queue, owner, token, now + timedelta(seconds=ttl))
        read = await self.dialect.claim_at_scan(self.engine, scan, fence)
        if read is not None and read.queue_row is None:
            raise LeaseLost(queue)
        return read

    # -- what the owner reads outside its batch ------------------------------------------

    async def queue_limits(self, queue: str) -> dict[str, Any]:
        """The queue's limit overrides ({}: none), as the owner picks them up."""
        async with self._read() as conn:
            limits = (
                await conn.execute(select(queues.c.limits).where(queues.c.name == queue))
            ).scalar_one_or_none()
        return limits or {}

    async def job_in_flight(self, queue: str) -> list[Job]:
        async with self._read() as conn:
            rows = await conn.execute(
                select(jobs).where(jobs.c.queue == queue, jobs.c.state.in_(IN_FLIGHT_SQL))
            )
            return [row_to_job(r) for r in rows.all()]

    async def job_note_oversized(self, queue: str, capacity: int) -> None:
        """Say why scheduled jobs heavier than the queue's whole capacity wait.

        The API refuses such jobs; they exist after an operator lowered the capacity,
        and a loop that reads only its free capacity's worth of due jobs skips them.
        """
        reason = literal("weight ", String) + cast(jobs.c.weight, String)
        async with self._write() as conn:
            await conn.execute(
                update(jobs)
                .where(
                    jobs.c.queue == queue,
                    guards.NOTE_OVERSIZED.sql(jobs.c.state),
                    jobs.c.weight > capacity,
                )
                .values(waiting_reason=reason + f" exceeds the capacity of {capacity}")
            )

    async def job_recent_starts(self, queue: str, since: datetime) -> list[Start]:
        """Starts since ``since`` (finished attempts and in-flight jobs), oldest first."""
        finished = (
            select(attempts.c.started_at.label("at"), jobs.c.labels, jobs.c.critical)
            .join(jobs, jobs.c.id == attempts.c.job_id)
            .where(jobs.c.queue == queue, attempts.c.started_at >= since)
        )
        in_flight = select(jobs.c.claimed_at.label("at"), jobs.c.labels, jobs.c.critical).where(
            jobs.c.queue == queue, jobs.c.state.in_(IN_FLIGHT_SQL), jobs.c.claimed_at >= since
        )
        async with self._read() as conn:
            rows = (await conn.execute(finished.union_all(in_flight))).all()
        starts = (Start(at=r[0], labels=r[1] or {}, critical=bool(r[2])) for r in rows)
        return sorted(starts, key=lambda s: s.at)

    async def job_next_run_at(self, queue: str, after: datetime) -> datetime | None:
        async with self._read() as conn:
            params = {"b_queue": queue, "b_after": after}
            found: datetime | None = (await conn.execute(NEXT_RUN_AT, params)).scalar_one_or_none()
            return found
