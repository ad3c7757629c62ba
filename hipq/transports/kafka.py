"""The ``kafka`` transport: an aiokafka producer sends each job's request message.

The message goes to the job type's topic; its value is the JSON of the body
template (or of the payload), and the correlation key is the message key and/or
a header, so that the responder can echo it back.

The producer connects in the background and reconnects with backoff: hipq starts
and keeps serving while the broker is down. A send while the producer is not
connected fails at once (a failed attempt for the retry strategy) instead of
waiting, and every send is bounded by a timeout, so no job waits on the broker
longer than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]
from aiokafka.errors import (  # type: ignore[import-untyped]
    KafkaError,
    MessageSizeTooLargeError,
)

from hipq.config import KafkaConfig
from hipq.config import KafkaTransport as KafkaTransportConfig
from hipq.job_types import JobTypeInfo
from hipq.jobs import Job
from hipq.observability import tracing
from hipq.outcomes import Failed
from hipq.retry import AttemptError
from hipq.templates import job_context
from hipq.transports.base import JobTasks, Reporter, report_send
from hipq.transports.kafka_client import client_options, close_quietly, reconnect_backoff
from hipq.transports.rendering import BodyTemplate, RenderError, compile_body

log = logging.getLogger("hipq.transports.kafka")


@dataclass(frozen=True, slots=True)
class _Route:
    config: KafkaTransportConfig
    body: BodyTemplate | None


class KafkaTransport:
    def __init__(
        self,
        kafka: KafkaConfig,
        types: Mapping[str, JobTypeInfo],
        clock: Callable[[], datetime],
        *,
        send_timeout: float = 30.0,
        probe_interval: float = 10.0,
        producer_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._kafka, self._clock = kafka, clock
        self._routes: dict[str, _Route] = {}
        for name, info in types.items():
            cfg = info.config.transport.kafka
            if cfg is not None:
                where = f"job_types.{name}.transport.kafka.body"
                body = None if cfg.body is None else compile_body(cfg.body, where)
                self._routes[name] = _Route(cfg, body)
        self._send_timeout = send_timeout
        self._probe_interval = probe_interval
        self._options = dict(producer_options or {})
        self._producer: AIOKafkaProducer | None = None
        self._healthy = False
        self._check_now = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._tasks = JobTasks("hipq-kafka")

    @property
    def ready(self) -> bool:
        """Connected to the broker, as far as the last send or probe showed."""
        return self._producer is not None and self._healthy

    @property
    def busy(self) -> int:
        return len(self._tasks)

    async def start(self) -> None:
        """Return at once; the producer connects in the background."""
        if self._runner is None:
            self._runner = asyncio.create_task(self._maintain(), name="hipq-kafka-producer")

    async def stop(self) -> None:
        await self._tasks.cancel_all()
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
            self._runner = None
        producer, self._producer, self._healthy = self._producer, None, False
        if producer is not None:
            await close_quietly(producer)

    def dispatch(self, job: Job, reporter: Reporter) -> None:
        self._tasks.start(job.id, report_send("kafka", job, reporter, self._send(job)))

    def abandon(self, job_id: int) -> None:
        self._tasks.cancel(job_id)

    # -- sending ----------------------------------------------------------------

    async def _send(self, job: Job) -> Failed | None:
        """None: the message is on its way; else the failed attempt."""
        route = self._routes.get(job.type)
        if route is None:
            return _error(f"job type {job.type!r} has no kafka transport", retryable=False)
        if not job.correlation_key:
            return _error(
                "the job has no correlation key, so its response could never be matched"
                f" (give job type {job.type} a correlation_key template, or the job a key)",
                retryable=False,
            )
        cfg = route.config
        try:
            body = route.body.render(job_context(job)) if route.body else job.payload
        except RenderError as exc:
            return _error(f"request template: {exc}", retryable=False)
        value = orjson.dumps(body)
        key = job.correlation_key.encode()
        headers = [(cfg.header, key)] if cfg.header else []
        context: dict[str, str] = {}
        tracing.inject(context)  # the attempt's traceparent, with tracing on
        headers += [(name, text.encode()) for name, text in context.items()]
        producer = self._producer
        if producer is None or not self._healthy:
            return _error(
                f"kafka producer is not connected to {self._kafka.bootstrap_servers};"
                f" message to {cfg.topic} not sent"
            )
        try:
            async with asyncio.timeout(self._send_timeout):
                await producer.send_and_wait(
                    cfg.topic, value=value, key=key if cfg.key else None, headers=headers or None
                )
        except TimeoutError:
            self._suspect()
            return _error(f"kafka send to {cfg.topic} timed out after {self._send_timeout:g}s")
        except MessageSizeTooLargeError as exc:
            return _error(f"kafka message to {cfg.topic} is too large: {exc}", retryable=False)
        except KafkaError as exc:
            self._suspect()
            return _error(f"kafka send to {cfg.topic} failed: {exc!r}")
        return None

    # -- the connection -----------------------------------------------------------

    def _suspect(self) -> None:
        """A send failed: check the connection now rather than at the next probe."""
        self._check_now.set()

    async def _maintain(self) -> None:
        backoff = reconnect_backoff()
        while self._producer is None:
            producer = AIOKafkaProducer(
                **client_options(self._kafka),
                acks="all",
                linger_ms=5,  # a few ms of batching pays off when many jobs go at once
                request_timeout_ms=int(min(self._send_timeout, 30.0) * 1000),
                **self._options,
            )
            try:
                await asyncio.wait_for(producer.start(), 30.0)
            except asyncio.CancelledError:
                await close_quietly(producer)
                raise
            except Exception as exc:
                await close_quietly(producer)
                delay = backoff.next()
                log.warning(
                    "kafka producer cannot connect to %s (%r); retrying in %.1fs",
                    self._kafka.bootstrap_servers,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                continue
            self._producer, self._healthy = producer, True
            log.info("kafka producer connected to %s", self._kafka.bootstrap_servers)
        # aiokafka reconnects an established producer by itself; probing tells
        # /readyz and the fail-fast path whether the broker answers right now.
        backoff.reset()
        producer = self._producer
        while True:
            # While the broker is away, look more often: readiness comes back sooner.
            interval = self._probe_interval
            if not self._healthy:
                interval = min(interval, backoff.next())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._check_now.wait(), interval)
            self._check_now.clear()
            healthy = await _probe(producer.client)
            if healthy != self._healthy:
                log.warning(
                    "kafka producer %s %s",
                    "reconnected to" if healthy else "lost",
                    self._kafka.bootstrap_servers,
                )
            self._healthy = healthy
            if healthy:
                backoff.reset()


async def _probe(client: Any) -> bool:
    try:
        await asyncio.wait_for(client.fetch_all_metadata(), 5.0)
    except asyncio.CancelledError:
        raise
    except Exception:
        return False
    return True


def _error(message: str, retryable: bool = True) -> Failed:
    return Failed(AttemptError(message, kind="kafka", retryable=retryable))
