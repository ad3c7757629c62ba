"""The scheduler: an ``Activity`` that turns every schedule's due fire times into jobs.

Each tick reads the schedules from the database (so pause, resume and changes made
through any process hold in all), plans each one (``definition.plan``, pure) and
hands the fire times with their jobs to ``Store.schedule_fire``, which claims each
fire time and inserts its job in one transaction. Every process on a PostgreSQL
database runs a scheduler; the claims make each fire time one job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from hipq.activity import Loop
from hipq.events import Events
from hipq.ingest.job_in import JobIn
from hipq.ingest.job_intake import Intake, IntakeError
from hipq.jobs import NewJob
from hipq.schedules.cron import ScheduleError
from hipq.schedules.definition import Schedule, build_schedule, check_name, job_fields, plan
from hipq.store import Store
from hipq.store.schedules import BUFFERING, Fire, FireResult, ScheduleRow, Waiting

# Fire times decided per transaction, and the pause between two of them. A backfill
# of thousands (catch_up: all after a long gap) is many short transactions, between
# which the API's requests get the database: on SQLite a writer waiting for the write
# lock retries in sleeps of up to 100 ms, and without the pause it lost every race to
# the next transaction. Measured on SQLite, 1,000 fire times in one tick: POST /v1/jobs
# meanwhile waited up to 2.9-4.4 s in one transaction or in back-to-back ones of 50,
# 0.24 s with these (the backfill then makes about 110 jobs a second).
FIRES_PER_TRANSACTION = 25
BACKFILL_PAUSE_SECONDS = 0.12

log = logging.getLogger("hipq.schedules")


def schedule_fields(row: ScheduleRow) -> dict[str, Any]:
    """A stored schedule as the fields ``build_schedule`` reads."""
    return {
        "cron": row.cron,
        "timezone": row.timezone,
        "job": row.job,
        "catch_up": row.catch_up,
        "backfill": row.backfill_seconds,
        "overlap": row.overlap,
        "paused": row.paused,
        "pause_on_failure": row.pause_on_failure,
    }


def to_row(schedule: Schedule, now: datetime, checked_until: datetime | None = None) -> ScheduleRow:
    return ScheduleRow(
        name=schedule.name,
        source=schedule.source,
        cron=schedule.cron.expression,
        timezone=schedule.timezone,
        job=schedule.job,
        catch_up=schedule.catch_up,
        backfill_seconds=schedule.backfill_seconds,
        overlap=schedule.overlap,
        paused=schedule.paused,
        pause_on_failure=schedule.pause_on_failure,
        checked_until=checked_until or now,
        created_at=now,
        updated_at=now,
    )


class Scheduler(Loop):
    """``run_once`` decides every schedule's due fire times; ``start`` runs it every
    ``interval`` seconds. The clock is the service's, so tests move time by hand."""

    name = "scheduler"

    def __init__(
        self,
        store: Store,
        intake: Intake,
        clock: Callable[[], datetime],
        events: Events,
        configured: Mapping[str, dict[str, Any]],
        interval: float = 1.0,
        on_time: float = 60.0,
        run: bool = True,
    ) -> None:
        # ``run`` False: only ``run_once`` calls decide (tests drive it).
        super().__init__(log, "scheduler", interval, run=run)
        self.store, self.intake, self.clock, self.events = store, intake, clock, events
        self.configured, self.on_time = configured, on_time

    def check(self, name: str, fields: dict[str, Any], source: str = "api") -> Schedule:
        """A schedule checked as a job it makes would be: ``ScheduleError`` names the
        field (``job.type``, ``cron``, ``timezone``, ...)."""
        check_name(name)
        now = self.clock()
        schedule = build_schedule(name, fields, now, "config" if source == "config" else "api")
        fire = schedule.cron.next_after(now)
        assert fire is not None  # build_schedule refuses an expression that never fires
        self.new_job(schedule, fire, now)
        return schedule

    def new_job(
        self, schedule: Schedule, fire: datetime, now: datetime, backfilled: bool = False
    ) -> NewJob:
        """The fire time's job, checked and resolved exactly as ``POST /v1/jobs`` does
        (the API's model for the shape, then the intake for defaults and rules)."""
        try:
            job = JobIn.model_validate(job_fields(schedule, fire, backfilled))
            return self.intake.resolve(job.fields_set(), now)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ScheduleError(f"job.{where}", err["msg"]) from None
        except IntakeError as exc:
            raise ScheduleError(f"job.{exc.field}", exc.message) from None

    async def sync_config(self) -> None:
        """Store the config's schedules (they were checked when the service was built)."""
        now = self.clock()
        rows = [
            to_row(self.check(name, fields, "config"), now)
            for name, fields in self.configured.items()
        ]
        await self.store.schedule_sync_config(rows, now)

    async def run_once(self) -> list[FireResult]:
        """Decide the due fire times of every schedule that is not paused."""
        now = self.clock()
        done: list[FireResult] = []
        rows = await self.store.schedule_list()
        waiting = Waiting(set(), {})
        if any(r.pause_on_failure or r.overlap in BUFFERING for r in rows):
            waiting = await self.store.schedule_waiting()
        for row in rows:
            if row.paused:
                continue
            if row.name in waiting.failed and await self._paused_on_failure(row, now):
                continue
            try:
                if row.name in waiting.buffered:
                    done.extend(await self._release(row, waiting.buffered[row.name], now))
                if row.checked_until >= now:
                    continue
                done.extend(await self._decide(row, now))
            except ScheduleError as exc:  # e.g. its job type left the config
                log.error("schedule %s cannot fire: %s", row.name, exc)
                self.events.emit("schedule_failed", schedule=row.name, error=str(exc))
        return done

    async def run_now(self, name: str) -> FireResult:
        """One job of the schedule at once (paused or not, overlap or not)."""
        row = await self.store.schedule_get(name)
        now = self.clock()
        schedule = build_schedule(row.name, schedule_fields(row), now, "api")
        fire = Fire(now, self.new_job(schedule, now, now), "run_now")
        results = await self.store.schedule_fire(name, None, [fire], None, now)
        assert results is not None
        self._emit(name, results)
        return results[0]

    async def _paused_on_failure(self, row: ScheduleRow, now: datetime) -> bool:
        """Pause ``row`` if its latest job failed for good; whether it did."""
        paused = await self.store.schedule_pause_on_failure(row.name, now)
        if paused is None:
            return False
        log.warning("schedule %s paused: %s", row.name, paused.paused_reason)
        self.events.emit("schedule_paused", schedule=row.name, reason=paused.paused_reason)
        return True

    async def _release(
        self, row: ScheduleRow, buffered: tuple[datetime, datetime], now: datetime
    ) -> list[FireResult]:
        """The buffered fire time's job, once the schedule's previous job has ended."""
        at, decided_at = buffered
        schedule = build_schedule(row.name, schedule_fields(row), now, "api")
        late = self._late(at, decided_at)  # a missed fire time stays marked as one
        result = await self.store.schedule_release(
            row.name, at, self.new_job(schedule, at, now, late), now
        )
        if result is None:
            return []
        self._emit(row.name, [result])
        return [result]

    def _late(self, at: datetime, decided_at: datetime) -> bool:
        """Whether fire time ``at`` was missed when decided: its job is backfilled."""
        return (decided_at - at).total_seconds() > self.on_time

    async def _decide(self, row: ScheduleRow, now: datetime) -> list[FireResult]:
        schedule = build_schedule(row.name, schedule_fields(row), now, "api")
        # Up to MAX_FIRES_PER_TICK fire times are searched: not on the event loop.
        decided = await asyncio.to_thread(plan, schedule, row.checked_until, now, self.on_time)
        if not decided.changes:
            return []
        fires = []
        for at in decided.fires:
            try:
                fires.append(Fire(at, self.new_job(schedule, at, now, self._late(at, now))))
            except ScheduleError as exc:
                log.error("schedule %s at %s: %s", row.name, at.isoformat(), exc)
                self.events.emit("schedule_failed", schedule=row.name, error=str(exc))
                fires.append(Fire(at, None, "invalid"))
        results = await self._store_fires(row, fires, decided.checked_until, now)
        if decided.missed:
            self.events.emit("schedule_missed", schedule=row.name)
        self._emit(row.name, results, now)
        return results

    async def _store_fires(
        self, row: ScheduleRow, fires: list[Fire], until: datetime, now: datetime
    ) -> list[FireResult]:
        """``fires`` in transactions of ``FIRES_PER_TRANSACTION``, each moving the
        schedule's ``checked_until`` past its own (the next one expects that)."""
        results: list[FireResult] = []
        expected = row.checked_until
        for start in range(0, max(len(fires), 1), FIRES_PER_TRANSACTION):
            if start:
                await asyncio.sleep(BACKFILL_PAUSE_SECONDS)  # waiting requests go first
            chunk = fires[start : start + FIRES_PER_TRANSACTION]
            last = start + FIRES_PER_TRANSACTION >= len(fires)
            chunk_until = until if last else chunk[-1].at
            done = await self.store.schedule_fire(row.name, expected, chunk, chunk_until, now)
            if done is None:  # another process decided these meanwhile
                break
            results.extend(done)
            expected = max(expected, chunk_until)
        return results

    def _emit(self, name: str, results: list[FireResult], now: datetime | None = None) -> None:
        # Fire times older than on_time were missed and are caught up: each is an
        # event (backfill=True), and the log says so once, in one summary line.
        late = [
            r
            for r in results
            if r.job is not None and now is not None and (now - r.at).total_seconds() > self.on_time
        ]
        backfilled = {id(r) for r in late}
        for result in results:
            if result.job is not None:
                self.events.emit(
                    "schedule_fired",
                    schedule=name,
                    job_id=result.job.id,
                    fire_time=result.at.isoformat(),
                    backfill=id(result) in backfilled,
                )
            elif result.outcome == "skipped":
                self.events.emit("schedule_skipped", schedule=name, fire_time=result.at.isoformat())
            elif result.outcome == "buffered":
                self.events.emit(
                    "schedule_buffered", schedule=name, fire_time=result.at.isoformat()
                )
        if late:
            self.events.emit(
                "schedule_backfilled",
                schedule=name,
                jobs=len(late),
                first=late[0].at.isoformat(),
                last=late[-1].at.isoformat(),
            )

    async def starting(self) -> None:
        await self.sync_config()
