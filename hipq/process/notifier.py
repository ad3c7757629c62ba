"""The notifier: sends the outbox's notifications after their transactions committed.

A ``Loop``. Each step takes the due notifications (leased to this process, see
``hipq.store.outbox``), starts a try of each at its target (a webhook, signed the
Standard Webhooks way, or a Kafka topic) and records how the tries that ended went:
sent, or failing with the error and the time of the next try (the delay doubles up
to ``notifications.retry_max``; a notification is retried for ever, never dropped).
It steps every ``notifications.interval``, at once when a job of this process
reached a terminal state, and when a try ends.

The running notifier waits for no try: a target that answers slowly holds up only
its own notifications. A webhook try is bounded in total time (the target's
``timeout``, waiting for a connection included) and in bytes read
(``max_response_bytes``); each target has its own connections. Errors name a
target's URL as the http transport does (``shown_url``: no userinfo, no query).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx

from hipq.activity import Loop
from hipq.config import KafkaConfig, NotificationsConfig, NotificationTarget, WebhookTarget
from hipq.events import Events
from hipq.lifecycle import TERMINAL
from hipq.outbox import Delivery, Notification, retry_delay
from hipq.security.signatures import signature_headers
from hipq.store import Store
from hipq.transports.http import shown_url
from hipq.transports.kafka_client import client_options, close_quietly

log = logging.getLogger("hipq.process.notifier")

# Connections to one webhook target at once; more tries of it wait for one (within
# their timeout).
CONCURRENT_SENDS = 20
# Tries under way in a process, in batches: beyond it, due notifications wait in the
# outbox (a slow target's tries end within their timeout and then back off).
IN_FLIGHT_BATCHES = 10
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
        self._clients: dict[str, httpx.AsyncClient] = {}  # by target: its own connections
        self._producer: Any = None
        self._producer_started = asyncio.Lock()  # tries run at once: one producer for all
        self._trying: dict[int, asyncio.Task[Delivery]] = {}  # by notification id
        self._ended: list[tuple[Notification, Delivery]] = []  # tries not recorded yet
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
        """Start a try of each notification due now, wait for those tries, and record
        every try that ended; how each went. (Tests drive it; the running notifier's
        ``turn`` waits for none.)"""
        started = await self._start_due()
        if started:
            await asyncio.wait(started)
        return await self._record_ended()

    async def turn(self) -> float | None:
        # Each try that ends sets ``wake``: the next step records it.
        full = len(await self._start_due()) >= self.config.batch_size
        await self._record_ended()
        return None if full else self.interval

    async def _start_due(self) -> list[asyncio.Task[Delivery]]:
        room = IN_FLIGHT_BATCHES * self.config.batch_size - len(self._trying)
        limit = min(self.config.batch_size, room)
        if limit <= 0:
            return []
        taken = await self.store.notification_take(self.clock(), limit, self.config.lease)
        started = []
        for n in taken:
            if n.id in self._trying:
                continue  # its lease ran out during its try, which records it
            task = asyncio.create_task(self._try(n), name=f"hipq-notification-{n.id}")
            self._trying[n.id] = task
            task.add_done_callback(functools.partial(self._try_ended, n))
            started.append(task)
        return started

    def _try_ended(self, n: Notification, task: asyncio.Task[Delivery]) -> None:
        self._trying.pop(n.id, None)
        if task.cancelled():
            return  # stopped: it stays leased, and is sent again after its lease
        self._ended.append((n, task.result()))
        self.wake.set()

    async def _record_ended(self) -> list[Delivery]:
        ended, self._ended = self._ended, []
        if not ended:
            return []
        deliveries = [d for _, d in ended]
        try:
            await self.store.notification_record(deliveries, self.clock())
        except BaseException:
            self._ended[:0] = ended  # recorded by a later step
            raise
        for n, d in ended:
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
            await self._post(n.target, target.webhook, n)
        elif target.kafka is not None:
            await self._publish(target.kafka.topic, n)

    async def _post(self, name: str, hook: WebhookTarget, n: Notification) -> None:
        body = n.body()
        headers = {**hook.headers, "content-type": "application/json"}
        if hook.secret is not None:
            headers.update(signature_headers(hook.secret, n.message_id, int(time.time()), body))
        else:
            headers["webhook-id"] = n.message_id
        client = self._clients.get(name)
        if client is None:
            client = self._clients[name] = httpx.AsyncClient(
                follow_redirects=False,
                trust_env=False,
                limits=httpx.Limits(
                    max_connections=CONCURRENT_SENDS, max_keepalive_connections=CONCURRENT_SENDS
                ),
            )
        shown = shown_url(hook.url)
        status: int | None = None
        try:
            # In total, not per read: a receiver that drips its answer is cut off.
            async with asyncio.timeout(hook.timeout):
                request = client.build_request(
                    "POST", hook.url, content=body, headers=headers, timeout=hook.timeout
                )
                response = await client.send(request, stream=True)
                status = response.status_code
                try:
                    await _drop_body(response, hook.max_response_bytes)
                finally:
                    await response.aclose()
        except TimeoutError:
            if status is None:
                raise SendError(f"no answer from {shown} within {hook.timeout:g}s") from None
        except httpx.HTTPError as exc:
            # The answer's status came: what is left of its body does not matter.
            if status is None:
                raise SendError(f"{type(exc).__name__} from {shown}: {exc}") from None
        assert status is not None
        if not 200 <= status < 300:
            raise SendError(f"HTTP {status} from {shown}")

    async def _publish(self, topic: str, n: Notification) -> None:
        from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]

        async with self._producer_started:
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
                self._producer.send_and_wait(topic, n.body(), key=n.key, headers=headers),
                30.0,
            )
        except BaseException:
            # Reconnect at the next try rather than reuse a producer in doubt.
            producer, self._producer = self._producer, None
            await close_quietly(producer)
            raise

    # -- the activity ---------------------------------------------------------------

    async def stopped(self) -> None:
        # Tries under way end within their timeout; those cut off at the grace are
        # sent again after their lease.
        trying = list(self._trying.values())
        if trying:
            _done, late = await asyncio.wait(trying, timeout=self.grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*trying, return_exceptions=True)
        try:
            await self._record_ended()
        except Exception as exc:  # the store may be gone: the leases hand them on
            log.warning("notifier: tries that ended at stop are not recorded: %s", exc)
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await close_quietly(producer)


async def _drop_body(response: httpx.Response, cap: int) -> None:
    """Read and drop at most ``cap`` bytes of an answer's body (as sent, undecoded):
    reading a short body whole lets its connection serve the next try; a longer one's
    connection is closed instead."""
    read = 0
    async for chunk in response.aiter_raw():
        read += len(chunk)
        if read > cap:
            return
