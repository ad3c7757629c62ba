"""Building a hipq process from its settings: the store, job types, intake,
transports, one loop per queue, and the background activities around them.

``build_parts`` returns them, for the ``Service`` that runs them (``hipq.service``);
building fails with ``ServiceError`` (one readable line) on a configuration hipq cannot
run.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from hipq.batch_loop.chain import ChainConfigError, build_stages
from hipq.batch_loop.limits import LiveLimits
from hipq.batch_loop.loop import QueueLoop
from hipq.config import Settings
from hipq.events import Events
from hipq.ingest.job_intake import Intake
from hipq.ingest.job_writer import JobWriter
from hipq.ingest.response_writer import ResponseWriter
from hipq.job_types import JobTypeError, JobTypes
from hipq.observability.lifecycle_log import LifecycleLog
from hipq.plugins import RetryStrategies
from hipq.process.executor import Executor
from hipq.process.registry import ProcessRegistry
from hipq.process.scheduler import Scheduler
from hipq.process.upkeep import Upkeep
from hipq.schedules import ScheduleError
from hipq.store import Store
from hipq.store.processes import ProcessInfo
from hipq.store.wakeup import Wakeups
from hipq.transports.base import Transport
from hipq.transports.python import HandlerImportError, PythonTransport, import_handler
from hipq.transports.traced import traced
from hipq.version import __version__

if TYPE_CHECKING:
    from hipq.process.kafka_consumer import ResponseConsumer
    from hipq.transports.kafka import KafkaTransport


def utcnow() -> datetime:
    return datetime.now(UTC)


class ServiceError(RuntimeError):
    """hipq cannot start as configured; the message is one readable line."""


@dataclass
class Parts:
    """What a ``Service`` runs, built once from the settings."""

    settings: Settings
    clock: Callable[[], datetime]
    owner: str
    run_loops: bool
    events: Events
    retry: RetryStrategies
    job_types: JobTypes
    intake: Intake
    store: Store
    wakeups: Wakeups
    transports: dict[str, Transport]
    kafka_producer: KafkaTransport | None
    loops: dict[str, QueueLoop]
    upkeep: Upkeep
    responses: ResponseWriter
    job_writer: JobWriter
    consumer: ResponseConsumer | None
    registry: ProcessRegistry
    scheduler: Scheduler | None = None
    executor: Executor | None = None  # PostgreSQL: sends jobs other owners hand over


def build_parts(
    settings: Settings,
    *,
    clock: Callable[[], datetime] = utcnow,
    owner: str | None = None,
    run_loops: bool = True,
) -> Parts:
    return _Wiring(settings, clock, owner, run_loops).parts()


class _Wiring:
    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], datetime],
        owner: str | None,
        run_loops: bool,
    ) -> None:
        self.settings, self.clock, self.run_loops = settings, clock, run_loops
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.events = Events()
        LifecycleLog(self.events)
        self.retry = RetryStrategies()
        try:
            self.job_types = JobTypes.compile(settings, self.retry)
        except JobTypeError as exc:  # a job type's retry or correlation_key: one line
            raise ServiceError(f"config error: {exc}") from None
        self.intake = Intake(settings, self.job_types, self.retry)
        self.store = Store.from_url(settings.database_url)

    def parts(self) -> Parts:
        settings = self.settings
        self.transports = traced(self._transports())
        self.loops = {name: self._loop(name) for name in settings.queues}
        self.wakeups = Wakeups(self.loops)
        self.store.listeners.append(self.wakeups.deliver)
        self.wake_all = self.wakeups.all
        executor = self._executor()
        if executor is not None:
            self.wakeups.handed.append(executor.handed_to)
        return Parts(
            settings=settings,
            clock=self.clock,
            owner=self.owner,
            run_loops=self.run_loops,
            events=self.events,
            retry=self.retry,
            job_types=self.job_types,
            intake=self.intake,
            store=self.store,
            wakeups=self.wakeups,
            transports=self.transports,
            kafka_producer=self.kafka_producer,
            loops=self.loops,
            upkeep=Upkeep(settings, self.store, self.clock, self.events),
            responses=ResponseWriter(self.store, self.clock, settings.responses.ttl, self.events),
            job_writer=JobWriter(self.store, self.clock),
            consumer=self._consumer(),
            registry=self._registry(),
            scheduler=self._scheduler(),
            executor=executor,
        )

    def _executor(self) -> Executor | None:
        """Where other processes share the database (PostgreSQL), this one sends the
        jobs their queues' owners hand to it; on SQLite it is alone."""
        if self.store.dialect.name != "postgresql":
            return None
        poll = min((q.batch_interval for q in self.settings.queues.values()), default=1.0)
        return Executor(
            self.store, self.owner, self.transports, self.clock, poll, run=self.run_loops
        )

    def _registry(self) -> ProcessRegistry:
        """This process's row among the live processes, and its share of the queues."""
        now = self.clock()
        serves = ProcessRegistry.serves(self.settings.queues, self.settings.serve_queues)
        me = ProcessInfo(
            id=self.owner,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=now,
            heartbeat_at=now,
            queues=serves,
            version=__version__,
        )
        return ProcessRegistry(
            self.store,
            self.loops,
            me,
            self.clock,
            self.settings.lease_ttl,
            steers_loops=self.run_loops,
        )

    def _scheduler(self) -> Scheduler:
        """The scheduler, with the config's schedules checked as their jobs would be."""
        configured = {
            name: schedule.model_dump() for name, schedule in self.settings.schedules.items()
        }
        scheduler = Scheduler(
            self.store,
            self.intake,
            self.clock,
            self.events,
            configured,
            interval=self.settings.scheduler.interval,
            on_time=self.settings.scheduler.on_time,
            run=self.run_loops,
        )
        for name, fields in configured.items():
            try:
                scheduler.check(name, fields, "config")
            except ScheduleError as exc:
                raise ServiceError(f"config error: schedules.{name}.{exc}") from None
        return scheduler

    def _loop(self, name: str) -> QueueLoop:
        try:
            stages = build_stages(name, self.settings)
        except ChainConfigError as exc:
            raise ServiceError(str(exc)) from None
        return QueueLoop(
            name,
            self.settings.queues[name],
            self.store,
            owner=self.owner,
            stages=stages,
            transports=self.transports,
            retry=self.retry,
            job_types=self.job_types,
            clock=self.clock,
            events=self.events,
            lease_ttl=self.settings.lease_ttl,
            limits=LiveLimits(name, self.settings),
            hand_back_grace=self.settings.shutdown_grace,
        )

    def _transports(self) -> dict[str, Transport]:
        by_kind: dict[str, list[str]] = {"python": [], "http": [], "kafka": [], "pull": []}
        for name, jt in self.settings.job_types.items():
            by_kind[jt.transport.kind].append(name)
        handlers = {}
        for name in by_kind["python"]:
            spec = self.settings.job_types[name].transport.python
            assert spec is not None
            try:
                handlers[name] = import_handler(spec.handler)
            except HandlerImportError as exc:
                raise ServiceError(
                    f"config error: job_types.{name}.transport.python: {exc}"
                ) from None
        self.kafka_producer: KafkaTransport | None = None
        out: dict[str, Transport] = {}
        python = PythonTransport(handlers, self.clock)
        out.update({name: python for name in handlers})
        if by_kind["pull"]:
            from hipq.pull.transport import PullTransport

            pull = PullTransport(self.store.pull_announce)
            out.update({name: pull for name in by_kind["pull"]})
        types = self.job_types
        try:
            if by_kind["http"]:
                from hipq.transports.http import HttpTransport

                http = HttpTransport(types, self.settings.server.base_url(), self.clock)
                out.update({name: http for name in by_kind["http"]})
            if by_kind["kafka"]:
                from hipq.transports.kafka import KafkaTransport

                kafka = KafkaTransport(self.settings.kafka, types, self.clock)
                out.update({name: kafka for name in by_kind["kafka"]})
                self.kafka_producer = kafka
        except ValueError as exc:
            raise ServiceError(f"config error: {exc}") from None
        return out

    def _consumer(self) -> ResponseConsumer | None:
        kafka = self.settings.kafka
        if not kafka.enabled or not kafka.responses:
            return None
        from hipq.process.kafka_consumer import ResponseConsumer

        try:
            return ResponseConsumer(
                kafka,
                self.store,
                self.clock,
                self.settings.responses.ttl,
                self.wake_all,
                consumer_options={
                    "session_timeout_ms": int(kafka.session_timeout * 1000),
                    "heartbeat_interval_ms": int(kafka.heartbeat_interval * 1000),
                },
                events=self.events,
            )
        except ValueError as exc:
            raise ServiceError(f"config error: {exc}") from None
