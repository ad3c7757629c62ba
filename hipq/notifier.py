"""The notifier: sends the outbox's notifications after their transactions committed.

An ``Activity``. Each step takes the due notifications (leased to this process, see
``hipq.store.outbox``), sends each to its target (a webhook, signed the Standard
Webhooks way, or a Kafka topic) and records how each try went: sent, or failing
with the error and the time of the next try (the delay doubles up to
``notifications.retry_max``; a notification is retried for ever, never dropped).
It steps every ``notifications.interval``, and at once when a job of this process
reached a terminal state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx

from hipq.activity import Loop
from hipq.config import KafkaConfig, NotificationsConfig, NotificationTarget, WebhookTarget
from hipq.events import Events
from hipq.kafka_client import client_options, close_quietly
from hipq.lifecycle import TERMINAL
from hipq.outbox import Delivery, Notification, retry_delay
from hipq.signatures import signature_headers
from hipq.store import Store

log = logging.getLogger("hipq.notifier")

# Tries of one step that run at once.
CONCURRENT_SENDS = 20
_TERMINAL = frozenset(s.value for s in TERMINAL)


class SendError(Exception):
    """A try that did not deliver; the message is what the outbox records."""


class Notifier(Loop):
    """A ``Loop``: steps every ``notifications.interval``, at once after a full batch,
    and when ``wake`` is set (a job reached a terminal state)."""

    name = "notifier"

    def __init__(
        self,
        config: NotificationsConfig,
        kafka: KafkaConfig,
        store: Store,
        clock: Callable[[], datetime],
        events: Events,
        run: bool = True,
    ) -> None:
        super().__init__(log, "notifier", config.interval, run=run)
        self.config, self.kafka, self.store = config, kafka, store
        self.clock, self.events = clock, events
        self._client: httpx.AsyncClient | None = None
        self._producer: Any = None
        events.subscribe(self._on_event)

    def _on_event(self, name: str, fields: dict[str, Any]) -> None:
        if name == "job_settled" and self.config.targets and fields.get("state") in _TERMINAL:
            self.wake.set()

    def on_settled(self, queue: str) -> None:
        """A ``settled:`` wake-up (this or another process ended jobs): look now."""
        if self.config.targets:
            self.wake.set()

    # -- one step -------------------------------------------------------------------

    async def run_once(self) -> list[Delivery]:
        """Send what is due now; how each try went."""
        now = self.clock()
        taken = await self.store.notification_take(now, self.config.batch_size, self.config.lease)
        if not taken:
            return []
        limit = asyncio.Semaphore(CONCURRENT_SENDS)

        async def one(n: Notification) -> Delivery:
            async with limit:
                return await self._try(n)

        deliveries = list(await asyncio.gather(*(one(n) for n in taken)))
        await self.store.notification_record(deliveries, self.clock())
        for n, d in zip(taken, deliveries, strict=True):
            if d.error is None:
                self.events.emit("notification_sent", id=n.id, job_id=n.job_id, target=n.target)
            else:
                self.events.emit(
                    "notification_failed",
                    id=n.id,
                    job_id=n.job_id,
                    target=n.target,
                    attempts=n.attempts + 1,
                    error=d.error,
                )
        return deliveries

    async def _try(self, n: Notification) -> Delivery:
        try:
            target = self.config.targets.get(n.target)
            if target is None:
                raise SendError(f"unknown notification target {n.target!r} (not in the config)")
            await self._send(target, n)
            return Delivery(n.id)
        except Exception as exc:
            delay = retry_delay(n.attempts + 1, self.config.retry_initial, self.config.retry_max)
            error = str(exc) if isinstance(exc, SendError) else f"{type(exc).__name__}: {exc}"
            return Delivery(n.id, error, self.clock() + timedelta(seconds=delay))

    async def _send(self, target: NotificationTarget, n: Notification) -> None:
        if target.webhook is not None:
            await self._post(target.webhook, n)
        elif target.kafka is not None:
            await self._publish(target.kafka.topic, n)

    async def _post(self, hook: WebhookTarget, n: Notification) -> None:
        body = n.body()
        headers = {**hook.headers, "content-type": "application/json"}
        if hook.secret is not None:
            headers.update(signature_headers(hook.secret, n.message_id, int(time.time()), body))
        else:
            headers["webhook-id"] = n.message_id
        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False, trust_env=False)
        response = await self._client.post(
            hook.url, content=body, headers=headers, timeout=hook.timeout
        )
        if not 200 <= response.status_code < 300:
            raise SendError(f"HTTP {response.status_code} from {hook.url}")

    async def _publish(self, topic: str, n: Notification) -> None:
        from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

        if self._producer is None:
            producer = AIOKafkaProducer(**client_options(self.kafka), acks="all")
            try:
                await asyncio.wait_for(producer.start(), 10.0)
            except BaseException:
                await close_quietly(producer)
                raise
            self._producer = producer
        headers = [("webhook-id", n.message_id.encode()), ("content-type", b"application/json")]
        try:
            await asyncio.wait_for(
                self._producer.send_and_wait(
                    topic, n.body(), key=str(n.job_id).encode(), headers=headers
                ),
                30.0,
            )
        except BaseException:
            # Reconnect at the next try rather than reuse a producer in doubt.
            producer, self._producer = self._producer, None
            await close_quietly(producer)
            raise

    # -- the activity ---------------------------------------------------------------

    async def turn(self) -> float | None:
        full = len(await self.run_once()) >= self.config.batch_size
        return None if full else self.interval

    async def stopped(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await close_quietly(producer)
