"""A hipq process: the store, one loop per queue, transports, wake-ups and upkeep.

``hipq serve`` runs one ``Service`` inside the API's lifespan; tests build one
directly and drive its loops tick by tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from sqlalchemy.engine import make_url

from hipq import migrations
from hipq.chain import ChainConfigError, build_stages
from hipq.config import Settings
from hipq.events import Events
from hipq.intake import Intake
from hipq.job_types import JobTypeError, JobTypes
from hipq.loop import QueueLoop
from hipq.plugins import RetryStrategies
from hipq.response_writer import ResponseWriter
from hipq.store import Store
from hipq.store.dialects import ALL_QUEUES, CANCEL_PREFIX
from hipq.transports.base import Transport
from hipq.transports.python import HandlerImportError, PythonTransport, import_handler
from hipq.upkeep import Upkeep
from hipq.wakeup import PgListener

log = logging.getLogger("hipq.service")


def utcnow() -> datetime:
    return datetime.now(UTC)


class ServiceError(RuntimeError):
    """hipq cannot start as configured; the message is one readable line."""


class SqliteLock:
    """One ``hipq serve`` per SQLite file: an exclusive lock on ``<file>.lock``.

    SQLite serialises writers and has no LISTEN/NOTIFY, so hipq does not pretend to
    share a file between processes: the second one is refused with a clear message.
    """

    def __init__(self, database_url: str) -> None:
        db = make_url(database_url).database
        if not db or db == ":memory:":
            raise ServiceError("database_url: hipq serve needs a SQLite file, not an in-memory DB")
        self.path = Path(db).resolve().with_name(Path(db).name + ".lock")
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self._file = open(self.path, "a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "another process"
            self._file.close()
            raise ServiceError(
                f"{self.path.with_suffix('')} is already served by {holder}; SQLite allows one "
                "hipq process per database file (use PostgreSQL to run several)"
            ) from None
        self._file.truncate(0)
        self._file.write(f"pid {os.getpid()}")
        self._file.flush()

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


class Service:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], datetime] = utcnow,
        owner: str | None = None,
        run_loops: bool = True,
    ) -> None:
        self.settings, self.clock = settings, clock
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.events = Events()
        self.retry = RetryStrategies()
        try:
            self.job_types = JobTypes.compile(settings, self.retry)
        except JobTypeError as exc:  # a job type's retry or correlation_key: one line
            raise ServiceError(f"config error: {exc}") from None
        self.intake = Intake(settings, self.job_types, self.retry)
        self.store = Store.from_url(settings.database_url)
        self.store.listeners.append(self.wake_queue)
        self.run_loops = run_loops
        self.transports = self._transports()
        self.loops = {name: self._loop(name) for name in settings.queues}
        self.upkeep = Upkeep(settings, self.store, clock, self.events)
        self.responses = ResponseWriter(self.store, clock, settings.responses.ttl, self.events)
        self.consumer = self._consumer()
        self._tasks: list[asyncio.Task[None]] = []
        self._sqlite_lock: SqliteLock | None = None
        self._listener: PgListener | None = None
        self.started = False

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
        )

    def _transports(self) -> dict[str, Transport]:
        by_kind: dict[str, list[str]] = {"python": [], "http": [], "kafka": []}
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
        out: dict[str, Transport] = {}
        python = PythonTransport(handlers, self.clock)
        out.update({name: python for name in handlers})
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
        except ValueError as exc:
            raise ServiceError(f"config error: {exc}") from None
        return out

    def _consumer(self) -> Any:
        kafka = self.settings.kafka
        if not kafka.enabled or not kafka.responses:
            return None
        from hipq.consumer import ResponseConsumer

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

    async def start(self) -> None:
        if self.store.dialect == "sqlite":
            self._sqlite_lock = SqliteLock(self.settings.database_url)
            self._sqlite_lock.acquire()
        try:
            await self.store.check()
            await migrations.ensure_current(self.store.engine, self.settings.migrate_on_start)
            if self._sqlite_lock is not None:
                # A crashed process's leases would otherwise idle the queues for lease_ttl.
                await self.store.lease_clear_all()
        except migrations.SchemaBehind as exc:
            await self._close_store()
            raise ServiceError(str(exc)) from None
        except Exception:
            await self._close_store()
            raise
        for transport in set(map(id, self.transports.values())):
            await next(t for t in self.transports.values() if id(t) == transport).start()
        if self.store.dialect == "postgresql":
            self._listener = PgListener(self.settings.database_url, self.wake_queue)
            self._listener.start()
        if self.run_loops:
            for loop in self.loops.values():
                await loop.start()
        self.upkeep.start()
        if self.consumer is not None:
            await self.consumer.start()
        self.started = True

    async def stop(self) -> None:
        # The loops first: no new job is claimed while the rest shuts down.
        for loop in self.loops.values():
            loop.request_stop()
        await self.responses.close()
        await self.upkeep.stop()
        if self.consumer is not None:
            await self.consumer.stop()
        await asyncio.gather(*(loop.stop() for loop in self.loops.values()))
        seen: set[int] = set()
        for transport in self.transports.values():
            if id(transport) not in seen:
                seen.add(id(transport))
                await transport.stop()
        for loop in self.loops.values():
            loop.chain.close()
            with contextlib.suppress(Exception):
                await loop.release()
        if self._listener:
            await self._listener.stop()
        await self._close_store()
        self.started = False

    async def _close_store(self) -> None:
        await self.store.close()
        if self._sqlite_lock:
            self._sqlite_lock.release()
            self._sqlite_lock = None

    def wake_queue(self, queue: str) -> None:
        """Act on a NOTIFY payload: a queue's name, ``*`` (new responses) or
        ``cancel:<queue>``; from this process's store or another process's."""
        if queue == ALL_QUEUES:
            for each in self.loops.values():
                each.hint_responses()
            return
        if queue.startswith(CANCEL_PREFIX):
            loop = self.loops.get(queue.removeprefix(CANCEL_PREFIX))
            if loop is not None:
                loop.hint_cancels()
            return
        loop = self.loops.get(queue)
        if loop is not None:
            loop.wake.set()

    def wake_all(self) -> None:
        self.wake_queue(ALL_QUEUES)

    def wake(self, queues: Iterable[str]) -> None:
        for queue in set(queues):
            self.wake_queue(queue)

    def status(self) -> dict[str, Any]:
        """What /readyz reports: None means "not used by this configuration"."""
        kafka_producer = next(
            (t for t in self.transports.values() if type(t).__name__ == "KafkaTransport"), None
        )
        return {
            "owner": self.owner,
            "queues_owned": sorted(n for n, lp in self.loops.items() if lp.token is not None),
            "listener": None if self._listener is None else self._listener.connected.is_set(),
            "kafka_producer": None if kafka_producer is None else bool(kafka_producer.ready),
            "kafka_consumer": None if self.consumer is None else bool(self.consumer.ready),
        }
