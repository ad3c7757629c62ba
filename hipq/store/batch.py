"""The writes of one tick of a queue's loop: ``QueueBatch``, inside one transaction.

``Store.queue_batch`` opens it, fenced by the queue's lease; every method is a
guarded update (``hipq.store.state_guards``), so a lost race changes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, exists, false, func, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.jobs import Job
from hipq.lifecycle import State, check_transition
from hipq.outcomes import Settlement
from hipq.store import state_guards as guards
from hipq.store.dialects import Dialect
from hipq.store.hand_off import REPORT_COLUMNS, Report
from hipq.store.labels import label_value
from hipq.store.pull_claims import WORKER_SOURCE
from hipq.store.records import LeaseLost, Match, Response
from hipq.store.schema import jobs, queues, reports, responses
from hipq.store.state_guards import (
    IN_FLIGHT_SQL,
    OPEN_SQL,
    PENDING_SQL,
    RUNNING_SQL,
    SCHEDULED_SQL,
)
from hipq.store.statements import claimed_by
from hipq.store.tick import DueScanOf, Fence, Tick
from hipq.store.wakeup import handed_payload


class QueueBatch:
    """The writes of one tick of a queue's loop, all inside one transaction."""

    forbidden_flags: frozenset[str] = frozenset()  # the queue's, read with its lease

    def __init__(
        self,
        conn: AsyncConnection,
        dialect: Dialect,
        queue: str,
        paused: bool,
        tick: Tick,
        fence: tuple[str, int, datetime] | None = None,
    ) -> None:
        self._conn, self.dialect, self.queue, self.paused = conn, dialect, queue, paused
        # The dialect's hot statements (``hipq.store.tick``), in this transaction.
        self._tick = tick
        # The lease fence not sent yet (queue, owner, token, new expiry): it goes with
        # the settle or the due scan when one is the tick's first statement, else on
        # its own.
        self._fence: Fence | None = None if fence is None else (queue, *fence)
        # (after, the next run_at after it) as the due scan read it; forgotten by any
        # write that may schedule a job later than now.
        self._next_run_at: tuple[datetime, datetime | None] | None = None

    @property
    def conn(self) -> AsyncConnection:
        """The transaction's connection, for statements of other modules."""
        if self._fence is not None:
            raise RuntimeError(f"queue {self.queue}: a statement before the lease fence")
        self._next_run_at = None  # what it writes is not known here
        return self._conn

    async def fence(self) -> None:
        """Send the lease fence if it has not gone yet; ``LeaseLost`` if it failed."""
        if self._fence is not None:
            self._fenced(await self._tick.fence(self._fence))

    def _fenced(self, row: Any) -> None:
        """The fence's answer: the queue's row (paused, forbidden flags), None if lost."""
        if row is None:
            raise LeaseLost(self.queue)
        self._fence = None
        self.paused, self.forbidden_flags = bool(row[0]), frozenset(row[1] or ())

    async def _execute(self, statement: Any, params: Any = None) -> Any:
        """A statement through SQLAlchemy, after the lease fence."""
        await self.fence()
        return await self._conn.execute(statement, params)

    async def job_settle(self, settlements: Sequence[Settlement], now: datetime) -> None:
        """Persist a tick's outcomes (and their attempt records) in one go; a job that
        is no longer in flight in that attempt is left alone (a lost race)."""
        if not settlements:
            return
        self._next_run_at = None
        fence = self._fence
        row = await self._tick.settle(settlements, now, fence)
        if fence is not None:
            self._fenced(row)

    async def job_due(
        self,
        now: datetime,
        limit: int,
        order: str,
        aging: float | None = None,
        max_weight: int | None = None,
        label: str | None = None,
        value: str | None = None,
        other_than: Sequence[str] = (),
    ) -> list[Job]:
        """Due jobs in queue order, none heavier than ``max_weight`` if given.

        With ``label``: only jobs whose label is ``value``, or, with ``value`` None,
        only jobs whose label is missing or not one of ``other_than``.

        The order is ``hipq.queue_order``'s; with aging no index serves it: the
        database sorts all due jobs of the queue each tick.

        With the lease fence still to send, it goes with the scan, and a paused queue
        reads nothing: ``paused`` says so afterwards. The scan also reads when the
        next job falls due after ``now`` (``knows_next_run_at``)."""
        where = None
        if label is not None:
            found = label_value(jobs.c.labels, label)
            if value is not None:
                where = found == value
            elif other_than:
                where = found.is_(None) | found.not_in(list(other_than))
        scan = DueScanOf(self.queue, now, limit, order, aging, max_weight, where)
        fence = self._fence
        read = await self._tick.due(scan, fence)
        if fence is not None:
            self._fenced(read.queue_row)
        self._next_run_at = (now, read.next_run_at)
        return read.jobs

    def knows_next_run_at(self, after: datetime) -> bool:
        """Whether ``job_next_run_at(after)`` costs no statement (the due scan read it)."""
        return self._next_run_at is not None and self._next_run_at[0] == after

    async def job_next_run_at(self, after: datetime) -> datetime | None:
        """When the queue's next scheduled job falls due after ``after``; read at the end
        of the tick, in its transaction, so the loop's sleep costs no transaction of its own."""
        await self.fence()
        if self._next_run_at is not None and self._next_run_at[0] == after:
            return self._next_run_at[1]
        return await self._tick.next_run_at(self.queue, after)

    async def job_claim(self, admitted: Sequence[Job], now: datetime) -> list[Job]:
        """scheduled -> running for ``admitted`` (rows the due scan locked in this transaction)."""
        by_timeout: dict[float, list[int]] = defaultdict(list)
        for job in admitted:
            by_timeout[job.timeout_seconds].append(job.id)
            if self._next_run_at is not None and job.run_at > self._next_run_at[0]:
                self._next_run_at = None  # not one the due scan read
        deadlines = {t: now + timedelta(seconds=t) for t in by_timeout}
        for timeout, ids in by_timeout.items():
            await self.fence()
            await self._tick.claim(ids, now, deadlines[timeout])
        mirrors = {t: claimed_by(now, d) for t, d in deadlines.items()}
        return [mirrors[j.timeout_seconds](j) for j in admitted]

    async def job_hand_off(self, handed: dict[int, str]) -> None:
        """Hand claimed jobs (job id -> process) to the processes that are to send them,
        one statement per process, and wake them once this commits."""
        by_executor: dict[str, list[int]] = defaultdict(list)
        for job_id, executor in handed.items():
            by_executor[executor].append(job_id)
        for executor, ids in by_executor.items():
            await self._execute(
                update(jobs)
                .where(self.dialect.id_in(jobs.c.id, ids), jobs.c.state == RUNNING_SQL)
                .values(executor=executor)
            )
        await self.dialect.notify(self._conn, {handed_payload(e) for e in by_executor})

    async def report_take(self) -> list[Report]:
        """The reports executors stored for this queue, deleted as they are read: they
        become state in this transaction, or stay if it rolls back."""
        rows = await self._execute(
            delete(reports)
            .where(reports.c.queue == self.queue)
            .returning(*(reports.c[name] for name in REPORT_COLUMNS), reports.c.id)
        )
        return [Report.of_row(r) for r in sorted(rows.all(), key=lambda r: r.id)]

    async def job_due_count(self, now: datetime, limit: int) -> int:
        """How many jobs of the queue are due, counted up to ``limit`` (a tick that
        reads none still says how many it holds: a full or paused queue)."""
        first = (
            select(jobs.c.id)
            .where(jobs.c.queue == self.queue, jobs.c.state == SCHEDULED_SQL, jobs.c.run_at <= now)
            .limit(limit)
            .subquery()
        )
        return int((await self._execute(select(func.count()).select_from(first))).scalar_one())

    async def job_defer(self, deferred: dict[int, datetime], reason: str, now: datetime) -> None:
        if not deferred:
            return
        self._next_run_at = None  # deferred jobs fall due later
        await self._execute(
            update(jobs)
            .where(jobs.c.id == bindparam("b_id"), guards.DEFER.sql(jobs.c.state))
            .values(run_at=bindparam("run_at"), waiting_reason=reason, updated_at=now),
            [{"b_id": i, "run_at": at} for i, at in deferred.items()],
        )

    async def job_note_waiting(self, reasons: dict[int, str]) -> None:
        """Record why held jobs wait; callers pass only the reasons that changed."""
        grouped: dict[str, list[int]] = defaultdict(list)
        for job_id, reason in reasons.items():
            grouped[reason].append(job_id)
        for reason, ids in grouped.items():
            await self._execute(
                update(jobs)
                .where(jobs.c.id.in_(ids), guards.NOTE_WAITING.sql(jobs.c.state))
                .values(waiting_reason=reason[:500])
            )

    async def job_mark_awaiting(self, items: Sequence[tuple[int, int]], now: datetime) -> None:
        """running -> awaiting for (job id, attempt) pairs whose request was sent."""
        if not items:
            return
        await self._execute(
            update(jobs)
            .where(
                jobs.c.id == bindparam("b_id"),
                jobs.c.attempt == bindparam("b_attempt"),
                guards.MARK_AWAITING.sql(jobs.c.state),
            )
            .values(state=State.AWAITING.value, updated_at=now),
            [{"b_id": i, "b_attempt": a} for i, a in items],
        )

    async def job_extend_deadlines(self, deadlines: dict[int, datetime]) -> None:
        if deadlines:
            await self._execute(
                update(jobs)
                .where(jobs.c.id == bindparam("b_id"), guards.EXTEND_DEADLINES.sql(jobs.c.state))
                .values(deadline=bindparam("deadline")),
                [{"b_id": i, "deadline": d} for i, d in deadlines.items()],
            )

    async def job_set_payloads(self, payloads: dict[int, dict[str, Any]]) -> None:
        """Checkpoints of in-flight jobs: a retry starts from the saved payload."""
        if payloads:
            await self._execute(
                update(jobs)
                .where(jobs.c.id == bindparam("b_id"), guards.SET_PAYLOADS.sql(jobs.c.state))
                .values(payload=bindparam("payload")),
                [{"b_id": i, "payload": p} for i, p in payloads.items()],
            )

    async def response_match(
        self,
        signed_types: Sequence[str] = (),
        worker_types: Collection[str] = (),
        limit: int = 1000,
    ) -> tuple[list[Match], list[int]]:
        """Pending responses whose job is in flight in this queue.

        A job of a type in ``signed_types`` matches only responses whose signature was
        verified for that type (callbacks with ``?type=``), so an unsigned callback
        cannot settle it. Returns the matches (the first response per job) and the ids
        of duplicates: further responses for a job matched in this batch, and copies
        of a response matched before (an earlier attempt's callback delivered twice
        under a per-job key must not settle the next attempt). A job of a type in
        ``worker_types`` (pull) matches only its workers' reports: any other response
        under its key stays pending, as one for a key no job has.
        """
        by_key = (
            select(responses, jobs.c.id.label("matched_job"), _is_copy().label("is_copy"))
            .join(jobs, jobs.c.correlation_key == responses.c.correlation_key)
            .where(
                responses.c.status == PENDING_SQL,
                responses.c.forced_job_id.is_(None),
                jobs.c.queue == self.queue,
                jobs.c.state.in_(IN_FLIGHT_SQL),
            )
        )
        if signed_types:
            by_key = by_key.where(
                jobs.c.type.not_in(list(signed_types)) | (responses.c.job_type == jobs.c.type)
            )
        if worker_types:
            by_key = by_key.where(
                jobs.c.type.not_in(list(worker_types)) | (responses.c.source == WORKER_SOURCE)
            )
        by_hand = (
            select(responses, jobs.c.id.label("matched_job"), false().label("is_copy"))
            .join(jobs, jobs.c.id == responses.c.forced_job_id)
            .where(
                responses.c.status == PENDING_SQL,
                jobs.c.queue == self.queue,
                jobs.c.state.in_(IN_FLIGHT_SQL),
            )
        )
        rows = (await self._execute(by_key.union_all(by_hand).limit(limit))).all()
        matches: list[Match] = []
        extra: list[int] = []
        seen: set[int] = set()
        for row in sorted(rows, key=lambda r: r.id):
            data = row._asdict()
            job_id = data.pop("matched_job")
            if data.pop("is_copy") or job_id in seen:
                extra.append(data["id"])
                continue
            seen.add(job_id)
            matches.append(Match(Response(**data), job_id))
        return matches, extra

    async def response_mark(
        self, matched: Sequence[tuple[int, int]], duplicates: Sequence[int], now: datetime
    ) -> int:
        """Settle (response id, job id) matches and duplicate responses, pending ones
        only; a match records the job's attempt it settled. Returns how many
        duplicates were marked (a response settled meanwhile is not counted)."""
        if matched:
            attempt = select(jobs.c.attempt).where(jobs.c.id == bindparam("job_id"))
            await self._execute(
                update(responses)
                .where(responses.c.id == bindparam("b_id"), responses.c.status == PENDING_SQL)
                .values(
                    status="matched",
                    job_id=bindparam("job_id"),
                    job_attempt=attempt.scalar_subquery(),
                    settled_at=now,
                ),
                [{"b_id": r, "job_id": j} for r, j in matched],
            )
        if not duplicates:
            return 0
        marked = await self._execute(
            update(responses)
            .where(responses.c.id.in_(list(duplicates)), responses.c.status == PENDING_SQL)
            .values(status="duplicate", settled_at=now)
        )
        return marked.rowcount or 0

    async def response_accept_late(
        self,
        types: Sequence[str],
        now: datetime,
        limit: int = 1000,
        signed_types: Sequence[str] = (),
    ) -> list[int]:
        """Complete failed or cancelled jobs of ``types`` with their late successful
        responses (upkeep marked them late with the job's id). Returns the job ids.
        A job of a type in ``signed_types`` takes only a response signed for it."""
        signed_only = jobs.c.type.not_in(list(signed_types)) | (responses.c.job_type == jobs.c.type)
        rows = (
            await self._execute(
                select(
                    responses.c.id,
                    responses.c.body,
                    responses.c.settled_at,
                    jobs.c.id.label("job"),
                    jobs.c.attempt,
                    jobs.c.claimed_at,
                    jobs.c.state,
                )
                .join(jobs, jobs.c.id == responses.c.job_id)
                .where(
                    responses.c.status == "late",
                    responses.c.succeeded.is_(True),
                    jobs.c.queue == self.queue,
                    jobs.c.type.in_(list(types)),
                    jobs.c.state.in_(sorted(s.value for s in guards.ACCEPT_LATE.sources)),
                    signed_only if signed_types else true(),
                )
                .order_by(responses.c.id)
                .limit(limit)
            )
        ).all()
        done: list[int] = []
        for row in rows:
            if row.job not in done and await self._complete_late(row, now):
                done.append(row.job)
        return done

    async def _complete_late(self, row: Any, now: datetime) -> bool:
        """Complete one job with its late response; False if either changed meanwhile."""
        check_transition(row.state, State.COMPLETED)
        taken = await self._execute(
            update(responses)
            .where(responses.c.id == row.id, responses.c.status == "late")
            .values(status="matched", job_attempt=row.attempt, settled_at=now)
        )
        if taken.rowcount != 1:
            return False  # an operator reopened it
        changed = await self._execute(
            update(jobs)
            .where(
                jobs.c.id == row.job,
                jobs.c.state == row.state,  # unchanged since read
                guards.ACCEPT_LATE.sql(jobs.c.state),
            )
            .values(
                state=State.COMPLETED.value,
                result=row.body,
                finished_at=now,
                updated_at=now,
                last_error=None,
            )
        )
        if changed.rowcount != 1:
            await self._execute(  # the job moved on: the response stays late
                update(responses)
                .where(responses.c.id == row.id, responses.c.status == "matched")
                .values(status="late", job_attempt=None, settled_at=row.settled_at)
            )
            return False
        await self._execute(
            self.dialect.attempt_insert().values(
                job_id=row.job,
                attempt=row.attempt,
                started_at=row.claimed_at,
                finished_at=now,
                outcome="completed",
                error="late response accepted",
                response=row.body,
            )
        )
        return True

    async def job_keys_in_use(self, keys: dict[int, str]) -> dict[int, str]:
        """Of ``keys`` (job id -> key), those another open job already holds, or that
        an earlier job of the same batch takes: job id -> why."""
        taken: dict[int, str] = {}
        first: dict[str, int] = {}
        for job_id, key in keys.items():
            if key in first:
                taken[job_id] = f"correlation key {key!r} is built by job {first[key]} too"
            first.setdefault(key, job_id)
        if not first:
            return taken
        rows = await self._execute(
            select(jobs.c.id, jobs.c.correlation_key).where(
                jobs.c.correlation_key.in_(list(first)), jobs.c.state.in_(OPEN_SQL)
            )
        )
        for holder, key in rows.all():
            job_id = first[key]
            if holder != job_id:
                taken[job_id] = f"correlation key {key!r} is used by open job {holder}"
        return taken

    async def job_set_correlation_keys(self, keys: dict[int, str]) -> None:
        """Keys built at dispatch (templates using the job id or attempt)."""
        if keys:
            await self._execute(
                update(jobs)
                .where(jobs.c.id == bindparam("b_id"))
                .values(correlation_key=bindparam("key")),
                [{"b_id": i, "key": k} for i, k in keys.items()],
            )

    async def queue_write_stats(self, stats: dict[str, Any]) -> None:
        await self._execute(update(queues).where(queues.c.name == self.queue).values(stats=stats))

    async def job_cancel_requests(self) -> list[int]:
        rows = await self._execute(
            select(jobs.c.id).where(
                jobs.c.queue == self.queue,
                jobs.c.cancel_requested.is_(True),
                jobs.c.state.in_(IN_FLIGHT_SQL),
            )
        )
        return list(rows.scalars().all())


def _is_copy() -> Any:
    """Whether the response is a copy of one already matched: the same key and
    fingerprint (``hipq.ingest.response_intake.fingerprint``)."""
    matched = responses.alias("matched")
    return (
        exists()
        .where(
            matched.c.correlation_key == responses.c.correlation_key,
            matched.c.fingerprint == responses.c.fingerprint,
            matched.c.status == "matched",
        )
        .correlate_except(matched)
    )
