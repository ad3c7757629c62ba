"""A running hipq process: its activities, started in order and stopped in reverse.

``hipq serve`` runs one ``Service`` inside the API's lifespan; an application runs one in
its own process (``async with Service.from_config(...) as service``, then
``service.add_job(...)``: docs/howto-embed.md); tests build one (``Service(settings)`` or
``build_service``) and drive its loops tick by tick
(``hipq.testing.run_until_idle``). What the parts are and how they are built is
``hipq.process.wiring``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from hipq.activity import Activity
from hipq.backoff import Backoff
from hipq.batch_loop.loop import QueueLoop
from hipq.config import Settings, load_settings
from hipq.faults import unavailable
from hipq.ingest.job_intake import IntakeError
from hipq.jobs import Job, NewJob
from hipq.lifecycle import State
from hipq.observability import tracing
from hipq.process.bulk_runner import BulkRunner
from hipq.process.job_types_publisher import JobTypesPublisher
from hipq.process.job_waiters import JobWaiters
from hipq.process.notifier import Notifier
from hipq.process.queue_gauges import QueueGaugeReader
from hipq.process.status_polls import status_polls_of
from hipq.process.wiring import Parts, ServiceError, build_parts, utcnow
from hipq.pull.waiters import FetchWaiters
from hipq.stopping import drain
from hipq.store import JobFilter, Store, migrations
from hipq.store.process_guard import ProcessGuard
from hipq.transports.base import Transport

if TYPE_CHECKING:
    from hipq.process.kafka_consumer import ResponseConsumer

log = logging.getLogger("hipq.service")

__all__ = ["IntakeError", "Service", "ServiceError", "build_service", "utcnow"]

JobKeyMode = Literal["replace", "preserve_run_at", "unsafe_dedupe"]


class StoreActivity:
    """The database made ready to serve at start (checked, migrated), closed at stop.

    A database that is down or still starting up is waited for, with backoff, for
    ``wait_seconds``; then start fails with one line naming the cause.
    """

    name = "store"

    def __init__(self, store: Store, migrate: bool, wait_seconds: float = 0.0) -> None:
        self.store, self.migrate, self.wait_seconds = store, migrate, wait_seconds

    async def start(self) -> None:
        try:
            await self._open_when_reachable()
        except migrations.SchemaBehind as exc:
            await self.store.close()
            raise ServiceError(str(exc)) from None
        except Exception:
            await self.store.close()
            raise

    async def _open_when_reachable(self) -> None:
        give_up = time.monotonic() + self.wait_seconds
        backoff = Backoff(first=0.25, cap=2.0)
        while True:
            try:
                await self.store.open(self.migrate)
                return
            except Exception as exc:
                cause = unavailable(exc)
                if cause is None:
                    raise
                delay = backoff.next()
                if time.monotonic() + delay > give_up:
                    raise ServiceError(
                        f"the database is unavailable (waited {self.wait_seconds:g}s): {cause}"
                    ) from None
                if backoff.failures == 1:
                    log.warning("waiting up to %gs for the database (%s)", self.wait_seconds, cause)
            await asyncio.sleep(delay)

    async def stop(self) -> None:
        await self.store.close()

    async def run_once(self) -> None:
        await self.store.ping()


class TransportActivity:
    def __init__(self, transport: Transport) -> None:
        self.name = f"transport-{type(transport).__name__}"
        self.transport = transport

    async def start(self) -> None:
        await self.transport.start()

    async def stop(self) -> None:
        await self.transport.stop()

    async def run_once(self) -> None:
        """Transports work as jobs are dispatched; there is no step to take."""


class ConsumerActivity:
    name = "kafka-consumer"

    def __init__(self, consumer: ResponseConsumer) -> None:
        self.consumer = consumer

    async def start(self) -> None:
        await self.consumer.start()

    async def stop(self) -> None:
        await self.consumer.stop()

    async def run_once(self) -> int:
        return await self.consumer.run_once()


class LoopActivity:
    """A queue's loop as a task (when loops run); at stop it ends its tick, closes
    its throttler chain and lets go of the queue's lease."""

    def __init__(self, loop: QueueLoop, run: bool) -> None:
        self.name = f"loop-{loop.name}"
        self.loop, self.run = loop, run

    async def start(self) -> None:
        if self.run:
            await self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        self.loop.chain.close()
        with contextlib.suppress(Exception):
            await self.loop.release()

    async def run_once(self) -> Any:
        return await self.loop.run_once()


class Service:
    """One hipq process's activities: what ``hipq serve`` runs, and what an application
    runs in its own process (``from_config``, ``async with``, ``add_job``, ``get_job``,
    ``wait_for_job``, ``list_jobs``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], datetime] = utcnow,
        owner: str | None = None,
        run_loops: bool = True,
        parts: Parts | None = None,
    ) -> None:
        # Without ``parts`` (tests), built here as ``build_service`` does.
        parts = parts or build_parts(settings, clock=clock, owner=owner, run_loops=run_loops)
        self.settings, self.clock, self.owner = parts.settings, parts.clock, parts.owner
        self.run_loops = parts.run_loops
        self.events, self.retry, self.job_types = parts.events, parts.retry, parts.job_types
        self.intake, self.store, self.transports = parts.intake, parts.store, parts.transports
        self.loops, self.upkeep, self.responses = parts.loops, parts.upkeep, parts.responses
        self.consumer, self.kafka_producer = parts.consumer, parts.kafka_producer
        self.wakeups = parts.wakeups
        self.job_writer = parts.job_writer
        self.scheduler = parts.scheduler
        self.registry = parts.registry
        self.executor = parts.executor
        self.bulk = BulkRunner(
            self.store, self.clock, self.settings.server.bulk_step_size, run=self.run_loops
        )
        self.queue_gauges = QueueGaugeReader(
            self.store,
            self.loops,
            self.clock,
            self.events,
            self.settings.metrics_interval,
            run=self.run_loops,
        )
        # Outcome notifications (hipq.outbox) and ``?wait=`` requests, both woken by the
        # core's events here and by ``settled:`` wake-ups from any process.
        self.notifier = Notifier(
            settings.notifications,
            settings.kafka,
            self.store,
            self.clock,
            self.events,
            run=self.run_loops,
        )
        self.waiters = JobWaiters(self.store)
        self.events.subscribe(self.waiters.on_event)
        self.wakeups.settled.extend((self.waiters.on_settled, self.notifier.on_settled))
        # Pull workers' fetches that wait, woken by claims of their types (``hipq.pull``).
        self.fetches = FetchWaiters()
        self.wakeups.pulled.append(self.fetches.on_pulled)
        self.guard: ProcessGuard = self.store.process_guard(
            settings.database_url, self.wakeups.deliver
        )
        self.activities = self._activities()
        self._started: list[Activity] = []
        self.started = False
        # Set by ``begin_stop``: when the drain of work in flight ends at the latest.
        self._drain_deadline: float | None = None
        self._hurry = False

    @classmethod
    def from_config(
        cls,
        config: str | os.PathLike[str] | Settings | None = None,
        *,
        clock: Callable[[], datetime] = utcnow,
        run_loops: bool = True,
        **settings: Any,
    ) -> Service:
        """A service as ``hipq serve --config`` builds it, not started: from a YAML file
        (or ``HIPQ_CONFIG``, or ready ``Settings``), with ``settings`` overriding its keys
        (``database_url=...``, ``queues={...}``). ``HIPQ_*`` variables apply as to the
        server. A bad config raises ``hipq.config.ConfigError``, one that hipq cannot
        run ``ServiceError``, each with one readable line.

        ``run_loops=False`` builds one whose queues run only when driven
        (``hipq.testing.run_until_idle``)."""
        if isinstance(config, Settings):
            if settings:  # a copy with unvalidated keys would fail later, less clearly
                raise TypeError(
                    "from_config: give keys to override with a config file, not Settings"
                )
            built = config
        else:
            built = load_settings(config, **settings)
        return build_service(built, clock=clock, run_loops=run_loops)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # As on SIGTERM: claim nothing more, let what runs finish for ``shutdown_grace``.
        self.begin_stop()
        await self.stop()

    def _activities(self) -> list[Activity]:
        """In start order. The loops come last, so that they stop first: no job is
        claimed while the rest shuts down."""
        distinct = {id(t): t for t in self.transports.values()}
        activities: list[Activity] = [
            self.guard,  # SQLite: the file lock, before anything touches the file
            StoreActivity(self.store, self.settings.migrate_on_start, self.settings.database_wait),
            JobTypesPublisher(self.settings, self.job_types, self.store, self.owner, self.clock),
            # Before the loops: its first beat says which queues they take; it stops
            # after them, deleting this process's row once their leases are released.
            self.registry,
            *(TransportActivity(t) for t in distinct.values()),
            # After the transports it uses, before the registry deletes this process's
            # row: at stop it stores the reports of its last sends first.
            *([self.executor] if self.executor is not None else []),
            self.responses,
            self.job_writer,
            self.upkeep,
            self.queue_gauges,
            self.bulk,
            self.notifier,
            self.waiters,
        ]
        if self.scheduler is not None:
            activities.append(self.scheduler)
        if self.consumer is not None:
            activities.append(ConsumerActivity(self.consumer))
        polls = status_polls_of(self)  # before the loops: it stops after them
        if polls is not None:
            activities.append(polls)
        activities.extend(LoopActivity(loop, self.run_loops) for loop in self.loops.values())
        return activities

    async def start(self) -> None:
        self.fetches.reopen()
        for activity in self.activities:
            try:
                await activity.start()
            except BaseException:
                await self._stop(reversed(self._started))
                raise
            self._started.append(activity)
        self.started = True

    def begin_stop(self, grace: float | None = None) -> None:
        """Claim nothing from now on; ``stop`` then lets the work in flight finish for up
        to ``grace`` seconds from now (default: ``shutdown_grace``). Safe to repeat: the
        first call sets the deadline."""
        if self._drain_deadline is not None:
            return
        grace = self.settings.shutdown_grace if grace is None else grace
        self._drain_deadline = time.monotonic() + grace
        self.waiters.release_all()
        self.fetches.release_all()
        self.registry.leave()  # the other processes take the queues as they are released
        for loop in self.loops.values():
            loop.request_drain()
        if self.executor is not None:
            self.executor.request_drain()

    def stop_now(self) -> None:
        """End a drain under way at once (a second signal): what still runs is cut off."""
        self._hurry = True

    async def stop(self) -> None:
        """Stop every activity in reverse order; after ``begin_stop``, first wait for the
        work in flight (handlers, sends) and let the loops record what it reported."""
        self.fetches.release_all()  # a waiting fetch would hold up the server's shutdown
        if self._drain_deadline is not None:
            await self._drain(self._drain_deadline)
        # Every activity, also those a failed start left out: each stop is safe to repeat.
        await self._stop(reversed(self.activities))
        self.started = False
        self._drain_deadline, self._hurry = None, False

    async def _drain(self, deadline: float) -> None:
        # Only a loop that ticks can record what its jobs report.
        loops = [lp for lp in self.loops.values() if lp.running]
        if not loops:
            return
        transports = list({id(t): t for t in self.transports.values()}.values())

        def in_flight() -> int:
            unrecorded = sum(1 for lp in loops if lp.settling or lp.ticking)
            if self.executor is not None and self.executor.settling:
                unrecorded += 1
            return sum(t.busy for t in transports) + unrecorded

        await drain(in_flight, deadline, lambda: self._hurry)

    async def _stop(self, activities: Iterable[Activity]) -> None:
        for activity in list(activities):
            await activity.stop()
        self._started.clear()

    def wake_queue(self, payload: str) -> None:
        """Act on a wake-up payload (``hipq.store.wakeup``), from this process or another."""
        self.wakeups.deliver(payload)

    def wake_all(self) -> None:
        self.wakeups.all()

    def wake(self, queues: Iterable[str]) -> None:
        for queue in set(queues):
            self.wake_queue(queue)

    def status(self) -> dict[str, Any]:
        """What /readyz reports: None means "not used by this configuration"."""
        producer, consumer = self.kafka_producer, self.consumer
        return {
            "owner": self.owner,
            "queues_owned": sorted(n for n, lp in self.loops.items() if lp.token is not None),
            "listener": self.guard.listening,
            "kafka_producer": None if producer is None else bool(producer.ready),
            "kafka_consumer": None if consumer is None else bool(consumer.ready),
        }

    # -- jobs, for an application that runs the service in its own process ----------

    async def add_job(
        self, type: str, payload: Mapping[str, Any] | None = None, **fields: Any
    ) -> Job:
        """Add one job as ``POST /v1/jobs`` does: ``fields`` are the API's job fields
        (``hipq.api.models.JobIn``: ``queue``, ``run_at``, ``labels``, ``after``,
        ``batch_id``, ...), which mean what the API's do; an unset one takes the job
        type's default, and a refused job raises ``IntakeError`` (``.field`` names the
        field, as the API's 422 does; an unknown keyword too) with nothing written. A
        ``job_key`` or ``correlation_key`` held by an open job raises
        ``hipq.store.Conflict`` (the API's 409). Returns the stored job."""
        fields = {"type": type, **({} if payload is None else {"payload": payload}), **fields}
        new = self._resolve([fields], "")
        self._check_started("add_job")
        with tracing.enqueue_span({}, new) as traced:
            result = await self.job_writer.insert(list(traced))
        return result.jobs[0]

    async def add_jobs(self, jobs: Sequence[Mapping[str, Any]]) -> list[Job]:
        """Add several jobs in one transaction, all or none, as ``POST /v1/jobs/batch``
        does: each a mapping of ``add_job``'s keyword names (``type`` included). A
        refusal names the job: ``IntakeError`` with ``.field`` such as ``jobs[2].type``."""
        limit = self.settings.server.max_batch_jobs
        if not 1 <= len(jobs) <= limit:
            raise IntakeError("jobs", f"between 1 and {limit} jobs per call, got {len(jobs)}")
        new = self._resolve([dict(j) for j in jobs], "jobs[")
        self._check_started("add_jobs")
        with tracing.enqueue_span({}, new) as traced:
            result = await self.store.job_insert_many(list(traced), self.clock(), None)
        return result.jobs

    async def get_job(self, job_id: int) -> Job:
        """The job as stored now; ``hipq.store.NotFound`` if there is none."""
        self._check_started("get_job")
        return await self.store.job_get(job_id)

    async def wait_for_job(self, job_id: int, timeout: float = 60.0) -> Job:  # noqa: ASYNC109
        """The job once it is finished (completed, failed or cancelled), or as it is
        when ``timeout`` seconds have passed: look at its ``state``."""
        self._check_started("wait_for_job")
        return (await self.waiters.wait(job_id, timeout)).job

    async def list_jobs(
        self,
        *,
        queue: str | None = None,
        state: State | Sequence[State] | None = None,
        type: str | None = None,
        job_key: str | None = None,
        labels: Mapping[str, str] | None = None,
        limit: int = 100,
    ) -> list[Job]:
        """Jobs that match every filter given, newest first, at most ``limit``."""
        self._check_started("list_jobs")
        states = () if state is None else (state,) if isinstance(state, State) else tuple(state)
        flt = JobFilter(
            queue=queue,
            states=tuple(State(s).value for s in states),
            type=type,
            labels=dict(labels or {}),
            job_key=job_key,
            limit=limit,
        )
        return await self.store.job_list(flt)

    def _check_started(self, what: str) -> None:
        if not self.started:
            raise ServiceError(f"{what}: the service is not started (use 'async with service')")

    def _resolve(self, jobs: list[dict[str, Any]], prefix: str) -> list[NewJob]:
        """Each job checked for shape by the API's own model, then resolved by the
        intake the API uses; an error names the field as the API does."""
        from pydantic import ValidationError

        from hipq.ingest.job_in import JobIn

        now = self.clock()
        new: list[NewJob] = []
        for i, fields in enumerate(jobs):
            where = f"{prefix}{i}]." if prefix else ""
            try:
                checked = JobIn.model_validate(fields)
                new.append(self.intake.resolve(checked.fields_set(), now))
            except ValidationError as exc:
                field, message = _first_problem(exc)
                named = f"{where}{field}" if field else where.rstrip(".")
                raise IntakeError(named, message) from None
            except IntakeError as exc:
                if not where:
                    raise
                raise exc.within(where) from None
        return new


def build_service(
    settings: Settings,
    *,
    clock: Callable[[], datetime] = utcnow,
    owner: str | None = None,
    run_loops: bool = True,
) -> Service:
    """The ``Service`` of ``settings``, its parts built by ``hipq.process.wiring``; a
    configuration hipq cannot run raises ``ServiceError`` (one readable line)."""
    parts = build_parts(settings, clock=clock, owner=owner, run_loops=run_loops)
    return Service(settings, parts=parts)


def _first_problem(exc: Any) -> tuple[str, str]:
    """A pydantic error's first problem: its field (``windows[0].tz``) and message, in
    the API's words."""
    err = exc.errors()[0]
    field = ""
    for part in err["loc"]:
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    if err["type"] == "missing":
        return field, "field required"
    if err["type"] == "extra_forbidden":
        return field, "unknown field"
    return field, str(err["msg"]).removeprefix("Value error, ")
