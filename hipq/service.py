"""A running hipq process: its activities, started in order and stopped in reverse.

``hipq serve`` runs one ``Service`` inside the API's lifespan; tests build one
(``Service(settings)`` or ``hipq.process.wiring.build_service``) and drive its loops tick
by tick. What the parts are and how they are built is ``hipq.process.wiring``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hipq.batch_loop.loop import QueueLoop
from hipq.config import Settings
from hipq.observability.faults import unavailable
from hipq.process.activity import Activity
from hipq.process.bulk_runner import BulkRunner
from hipq.process.job_types_publisher import JobTypesPublisher
from hipq.process.job_waiters import JobWaiters
from hipq.process.notifier import Notifier
from hipq.process.status_polls import status_polls_of
from hipq.process.stopping import drain
from hipq.process.wiring import Parts, ServiceError, build_parts, utcnow
from hipq.store import Store, migrations
from hipq.store.process_guard import ProcessGuard
from hipq.transports.base import Transport

if TYPE_CHECKING:
    from hipq.process.kafka_consumer import ResponseConsumer

log = logging.getLogger("hipq.service")

__all__ = ["Service", "ServiceError", "utcnow"]


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
        delay = 0.25
        while True:
            try:
                await self.store.open(self.migrate)
                return
            except Exception as exc:
                cause = unavailable(exc)
                if cause is None:
                    raise
                if time.monotonic() + delay > give_up:
                    raise ServiceError(
                        f"the database is unavailable (waited {self.wait_seconds:g}s): {cause}"
                    ) from None
                if delay == 0.25:
                    log.warning("waiting up to %gs for the database (%s)", self.wait_seconds, cause)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

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
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], datetime] = utcnow,
        owner: str | None = None,
        run_loops: bool = True,
        parts: Parts | None = None,
    ) -> None:
        # Without ``parts`` (tests), built here as ``hipq.process.wiring.build_service`` does.
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
        self.bulk = BulkRunner(
            self.store, self.clock, self.settings.server.bulk_step_size, run=self.run_loops
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
        self.guard: ProcessGuard = self.store.process_guard(
            settings.database_url, self.wakeups.deliver
        )
        self.activities = self._activities()
        self._started: list[Activity] = []
        self.started = False
        # Set by ``begin_stop``: when the drain of work in flight ends at the latest.
        self._drain_deadline: float | None = None
        self._hurry = False

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
            self.responses,
            self.job_writer,
            self.upkeep,
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
        self.registry.leave()  # the other processes take the queues as they are released
        for loop in self.loops.values():
            loop.request_drain()

    def stop_now(self) -> None:
        """End a drain under way at once (a second signal): what still runs is cut off."""
        self._hurry = True

    async def stop(self) -> None:
        """Stop every activity in reverse order; after ``begin_stop``, first wait for the
        work in flight (handlers, sends) and let the loops record what it reported."""
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
            return sum(t.busy for t in transports) + unrecorded

        await drain(in_flight, deadline, lambda: self._hurry)

    async def _stop(self, activities: Iterable[Activity]) -> None:
        for activity in list(activities):
            await activity.stop()
        self._started.clear()

    def wake_queue(self, payload: str) -> None:
        """Act on a wake-up payload (``hipq.batch_loop.wakeup``), from this process or another."""
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
