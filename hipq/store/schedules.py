"""The schedules tables: schedules, and the claim of each fire time with its job.

A fire time's job is inserted in the same transaction as its row in
``hipq_schedule_fires``, whose primary key (schedule, fire_time) is the claim: of
any number of processes deciding the same fire time, one inserts the row and its
job, the others insert nothing.

Overlap ``buffer_one`` and ``cancel_other`` hold a fire time back as a row of outcome
``buffered`` without a job (one at most per schedule); ``schedule_release`` inserts
its job once the schedule's previous job has ended, again under the schedule's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.jobs import Job, NewJob
from hipq.lifecycle import OPEN, State
from hipq.store.records import Conflict, NotFound
from hipq.store.schema import jobs, schedule_fires, schedules
from hipq.store.state_guards import OPEN_SQL, const
from hipq.store.transactions import Transactions
from hipq.store.wakeup import jobs_payload

_DEFINITION = (
    "cron",
    "timezone",
    "job",
    "catch_up",
    "backfill_seconds",
    "overlap",
    "pause_on_failure",
)
# A paused_reason is at most this long (a job's last_error can be long).
MAX_REASON = 1000


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A schedule as stored: its definition, whether it is paused, how far it decided."""

    name: str
    source: str  # "config" or "api"
    cron: str
    timezone: str
    job: dict[str, Any]
    catch_up: str
    backfill_seconds: float
    overlap: str
    paused: bool
    checked_until: datetime
    created_at: datetime
    updated_at: datetime
    pause_on_failure: bool = False
    paused_reason: str | None = None  # set when the scheduler paused it (pause_on_failure)


# The overlap policies that hold a fire time back until the previous job has ended.
BUFFERING = ("buffer_one", "cancel_other")


@dataclass(frozen=True, slots=True)
class Waiting:
    """What the scheduler looks at before deciding fire times, for all schedules."""

    failed: set[str]  # to pause (pause_on_failure)
    buffered: dict[str, tuple[datetime, datetime]]  # name: (fire time, decided at)


@dataclass(frozen=True, slots=True)
class Fire:
    """One fire time to decide: its job, or why it has none (``skip`` is overlap's)."""

    at: datetime
    job: NewJob | None
    outcome: str = "created"  # created | run_now | invalid


@dataclass(frozen=True, slots=True)
class FireResult:
    at: datetime
    # created | run_now | skipped | buffered | invalid | conflict | taken (another
    # process had it)
    outcome: str
    job: Job | None = None


def _row(row: Any) -> ScheduleRow:
    return ScheduleRow(**{c: getattr(row, c) for c in ScheduleRow.__dataclass_fields__})


class ScheduleTable(Transactions):
    if TYPE_CHECKING:  # from JobTable, the one insert path of a job (job keys included)

        async def _insert(
            self, conn: AsyncConnection, new_jobs: Sequence[NewJob], now: datetime
        ) -> list[Job]: ...

        async def _cancel(  # from OperatorTable: the one cancel of a job
            self, conn: AsyncConnection, job_id: int, now: datetime, reason: str | None
        ) -> Job: ...

    async def schedule_list(self) -> list[ScheduleRow]:
        async with self._read() as conn:
            rows = await conn.execute(select(schedules).order_by(schedules.c.name))
            return [_row(r) for r in rows]

    async def schedule_get(self, name: str) -> ScheduleRow:
        async with self._read() as conn:
            row = (await conn.execute(select(schedules).where(schedules.c.name == name))).first()
        if row is None:
            raise NotFound(f"schedule {name!r} does not exist", field="name")
        return _row(row)

    async def schedule_create(self, schedule: ScheduleRow) -> ScheduleRow:
        stmt = (
            self.dialect.insert(schedules)
            .values(**_values(schedule))
            .on_conflict_do_nothing()
            .returning(schedules.c.name)
        )
        async with self._write() as conn:
            if (await conn.execute(stmt)).first() is None:
                raise Conflict(f"schedule {schedule.name!r} exists already", field="name")
        return schedule

    async def schedule_change(self, name: str, changes: ScheduleRow, now: datetime) -> ScheduleRow:
        """Replace an API schedule's definition. A new cron or zone decides from ``now``
        on: the new expression's past fire times are not backfilled."""
        async with self._write() as conn:
            old = await self._locked(conn, name, writable=True)
            values = {c: getattr(changes, c) for c in _DEFINITION}
            values["updated_at"] = now
            if (changes.cron, changes.timezone) != (old.cron, old.timezone):
                values["checked_until"] = max(old.checked_until, now)
            await conn.execute(update(schedules).where(schedules.c.name == name).values(**values))
            return replace(old, **values)

    async def schedule_delete(self, name: str) -> None:
        async with self._write() as conn:
            await self._locked(conn, name, writable=True)
            await conn.execute(delete(schedule_fires).where(schedule_fires.c.schedule == name))
            await conn.execute(delete(schedules).where(schedules.c.name == name))

    async def schedule_set_paused(self, name: str, paused: bool, now: datetime) -> ScheduleRow:
        """Pause or resume. Resuming decides from ``now`` on: what fell due while
        paused is not caught up (pausing means "do not run"), and clears the reason
        of a pause by ``pause_on_failure`` (the failure is then seen: a failed job
        that ended before ``updated_at`` pauses nothing again)."""
        async with self._write() as conn:
            old = await self._locked(conn, name, writable=False)
            values: dict[str, Any] = {"paused": paused, "updated_at": now, "paused_reason": None}
            if old.paused and not paused:
                values["checked_until"] = max(old.checked_until, now)
            await conn.execute(update(schedules).where(schedules.c.name == name).values(**values))
            return replace(old, **values)

    async def schedule_sync_config(self, defined: Sequence[ScheduleRow], now: datetime) -> None:
        """Make the config's schedules the stored ones of source ``config``: new ones
        are inserted, changed ones updated (their paused state and progress kept, an
        API schedule of the same name taken over), removed ones deleted."""
        names = {s.name for s in defined}
        async with self._write() as conn:
            stored = {
                r.name: _row(r)
                for r in await conn.execute(self.dialect.for_update(select(schedules)))
            }
            for schedule in defined:
                old = stored.get(schedule.name)
                if old is None:
                    await conn.execute(
                        self.dialect.insert(schedules)
                        .values(**_values(schedule))
                        .on_conflict_do_nothing()
                    )
                    continue
                values = {c: getattr(schedule, c) for c in _DEFINITION}
                if any(getattr(old, c) != v for c, v in values.items()) or old.source != "config":
                    values.update(source="config", updated_at=now)
                    if (schedule.cron, schedule.timezone) != (old.cron, old.timezone):
                        values["checked_until"] = max(old.checked_until, now)
                    await conn.execute(
                        update(schedules).where(schedules.c.name == old.name).values(**values)
                    )
            gone = [n for n, r in stored.items() if r.source == "config" and n not in names]
            if gone:
                await conn.execute(
                    delete(schedule_fires).where(schedule_fires.c.schedule.in_(gone))
                )
                await conn.execute(delete(schedules).where(schedules.c.name.in_(gone)))

    async def schedule_fire(
        self,
        name: str,
        expected_until: datetime | None,
        fires: Sequence[Fire],
        until: datetime | None,
        now: datetime,
    ) -> list[FireResult] | None:
        """Decide ``fires`` and move the schedule's ``checked_until`` to ``until``, in
        one transaction; None (nothing done) when another process moved it first.

        ``expected_until`` None (run now) checks nothing and moves nothing. While the
        schedule's last job is open a fire time follows the schedule's ``overlap``.
        """
        async with self._write() as conn:
            row = await self._locked(conn, name, writable=False)
            if expected_until is not None and row.checked_until != expected_until:
                return None
            out = []
            for fire in fires:
                out.append(await self._fire_one(conn, row, fire, now))
            if until is not None and until > row.checked_until:
                await conn.execute(
                    update(schedules).where(schedules.c.name == name).values(checked_until=until)
                )
            queues = {r.job.queue for r in out if r.job is not None}
            if queues:
                await self._notify(conn, {jobs_payload(q) for q in queues})
            return out

    async def schedule_fires(self, name: str, limit: int = 50) -> list[dict[str, Any]]:
        """The latest decided fire times of a schedule, newest first."""
        query = (
            select(schedule_fires)
            .where(schedule_fires.c.schedule == name)
            .order_by(schedule_fires.c.fire_time.desc())
            .limit(limit)
        )
        async with self._read() as conn:
            return [dict(r._mapping) for r in await conn.execute(query)]

    async def _fire_one(
        self, conn: AsyncConnection, row: ScheduleRow, fire: Fire, now: datetime
    ) -> FireResult:
        outcome = fire.outcome
        if fire.job is not None and fire.outcome != "run_now" and row.overlap != "allow":
            outcome = await self._overlap(conn, row, now)
        claim = (
            self.dialect.insert(schedule_fires)
            .values(schedule=row.name, fire_time=fire.at, outcome=outcome, created_at=now)
            .on_conflict_do_nothing()
            .returning(schedule_fires.c.fire_time)
        )
        if (await conn.execute(claim)).first() is None:
            return FireResult(fire.at, "taken")
        if fire.job is None or outcome in ("skipped", "buffered"):
            return FireResult(fire.at, outcome)
        return await self._insert_fire_job(conn, row.name, fire.at, fire.job, outcome, now)

    async def _overlap(self, conn: AsyncConnection, row: ScheduleRow, now: datetime) -> str:
        """What a fire time of ``row`` becomes under its overlap policy: created,
        skipped or buffered. At most one fire time waits buffered: under buffer_one a
        later one is skipped, under cancel_other it takes the waiting one's place."""
        buffered = await self._buffered_at(conn, row.name)
        open_job = await self._last_open_job(conn, row.name)
        if row.overlap == "skip":
            return "skipped" if open_job is not None else "created"
        if row.overlap == "buffer_one":
            if buffered is not None:
                return "skipped"
            return "buffered" if open_job is not None else "created"
        # cancel_other
        if buffered is not None:  # the previous job is being cancelled already
            await self._set_fire(conn, row.name, buffered, None, "skipped")
            return "buffered"
        if open_job is None:
            return "created"
        reason = f"cancelled by schedule {row.name!r} (overlap cancel_other)"
        cancelled = await self._cancel(conn, open_job, now, reason)
        # A job in flight ends at its loop's next tick: this fire time waits for that.
        return "buffered" if cancelled.state in OPEN else "created"

    async def schedule_waiting(self) -> Waiting:
        """In two statements for all schedules (not two per schedule at every tick):
        those that ``pause_on_failure`` should pause, and the buffered fire times whose
        previous job has ended (a release is a write: only when it can happen)."""
        still_open = (
            select(jobs.c.id)
            .where(jobs.c.id == _last_job_id(schedules.c.name), jobs.c.state.in_(OPEN_SQL))
            .exists()
        )
        buffered = select(
            schedule_fires.c.schedule, schedule_fires.c.fire_time, schedule_fires.c.created_at
        ).where(
            schedule_fires.c.schedule == schedules.c.name,
            schedules.c.overlap.in_(BUFFERING),
            schedule_fires.c.outcome == "buffered",
            ~still_open,
        )
        async with self._read() as conn:
            failed = {r.name for r in await conn.execute(_failures())}
            waiting = {
                r.schedule: (r.fire_time, r.created_at) for r in await conn.execute(buffered)
            }
        return Waiting(failed, waiting)

    async def schedule_pause_on_failure(self, name: str, now: datetime) -> ScheduleRow | None:
        """Pause the schedule if the job of its latest fire time failed for good after
        the schedule was last resumed or changed; the paused row, or None."""
        async with self._write() as conn:
            row = await self._locked(conn, name, writable=False)
            failed = await self._failed_job(conn, name)
            if row.paused or failed is None:
                return None  # another process paused it, or an operator resumed it
            job_id, error = failed
            reason = f"job {job_id} failed: {error or 'no error given'}"[:MAX_REASON]
            values: dict[str, Any] = {"paused": True, "paused_reason": reason, "updated_at": now}
            await conn.execute(update(schedules).where(schedules.c.name == name).values(**values))
            return replace(row, **values)

    async def _failed_job(self, conn: AsyncConnection, name: str) -> tuple[int, str | None] | None:
        found = (await conn.execute(_failures().where(schedules.c.name == name))).first()
        return None if found is None else (found.id, found.last_error)

    async def schedule_release(
        self, name: str, at: datetime, job: NewJob, now: datetime
    ) -> FireResult | None:
        """Insert the job of the buffered fire time ``at`` if the schedule's previous
        job has ended; None when it has not, or another process released it first."""
        async with self._write() as conn:
            row = await self._locked(conn, name, writable=False)
            if row.paused or await self._buffered_at(conn, name) != at:
                return None
            if await self._last_open_job(conn, name) is not None:
                return None
            result = await self._insert_fire_job(conn, name, at, job, "created", now)
            if result.job is not None:
                await self._notify(conn, {jobs_payload(result.job.queue)})
            return result

    async def _insert_fire_job(
        self,
        conn: AsyncConnection,
        name: str,
        at: datetime,
        new: NewJob,
        outcome: str,
        now: datetime,
    ) -> FireResult:
        try:
            async with conn.begin_nested():
                job = (await self._insert(conn, [new], now))[0]
        except (IntegrityError, Conflict):
            # A correlation_key or job_key an open job holds: recorded, not retried.
            await self._set_fire(conn, name, at, None, "conflict")
            return FireResult(at, "conflict")
        await self._set_fire(conn, name, at, job.id, outcome)
        return FireResult(at, outcome, job)

    async def _set_fire(
        self, conn: AsyncConnection, name: str, at: datetime, job_id: int | None, outcome: str
    ) -> None:
        await conn.execute(
            update(schedule_fires)
            .where(schedule_fires.c.schedule == name, schedule_fires.c.fire_time == at)
            .values(job_id=job_id, outcome=outcome)
        )

    async def _last_open_job(self, conn: AsyncConnection, name: str) -> int | None:
        """The schedule's latest job if it is open (scheduled, running or awaiting)."""
        last = _last_job_id(name)
        query = select(jobs.c.id).where(jobs.c.id == last, jobs.c.state.in_(OPEN_SQL))
        return (await conn.execute(query)).scalar()

    async def _buffered_at(self, conn: AsyncConnection, name: str) -> datetime | None:
        query = select(schedule_fires.c.fire_time).where(
            schedule_fires.c.schedule == name, schedule_fires.c.outcome == "buffered"
        )
        return (await conn.execute(query.limit(1))).scalar()

    async def _locked(self, conn: AsyncConnection, name: str, writable: bool) -> ScheduleRow:
        query = self.dialect.for_update(select(schedules).where(schedules.c.name == name))
        row = (await conn.execute(query)).first()
        if row is None:
            raise NotFound(f"schedule {name!r} does not exist", field="name")
        found = _row(row)
        if writable and found.source == "config":
            raise Conflict(
                f"schedule {name!r} is defined in the config: change or remove it there "
                "(pause, resume and run-now work)",
                field="name",
            )
        return found


def _values(schedule: ScheduleRow) -> dict[str, Any]:
    return {c: getattr(schedule, c) for c in ScheduleRow.__dataclass_fields__}


def _failures() -> Any:
    """Schedules with pause_on_failure, not paused, whose latest job failed after the
    schedule's ``updated_at`` (its last resume or change): name, job id, error."""
    return (
        select(schedules.c.name, jobs.c.id, jobs.c.last_error)
        .select_from(schedules.join(jobs, jobs.c.id == _last_job_id(schedules.c.name)))
        .where(
            schedules.c.pause_on_failure.is_(True),
            schedules.c.paused.is_(False),
            jobs.c.state == const(State.FAILED.value),
            jobs.c.finished_at > schedules.c.updated_at,
        )
    )


def _last_job_id(name: Any) -> Any:
    """The id of the job of the schedule's latest fire time that made one (a subquery)."""
    return (
        select(schedule_fires.c.job_id)
        .where(schedule_fires.c.schedule == name, schedule_fires.c.job_id.is_not(None))
        .order_by(schedule_fires.c.fire_time.desc())
        .limit(1)
        .scalar_subquery()
    )
