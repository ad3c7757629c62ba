"""The Kafka response consumer: response messages into the responses inbox.

Every hipq process runs one consumer in the configured group; the group spreads
the partitions of the response topics over the processes. Each topic has a key
rule (``"{key}"``, ``"{headers.correlation_id}"``, ``"{value.order_id}:{value.request_id}"``)
and an outcome rule (none: every response is a success, as for callbacks).

Offsets are committed only after the batch's responses are stored, so a response
is never lost; a crash between the two redelivers it, and the inbox classifies the
copy as a duplicate. A message that cannot become a response (too large, not
UTF-8, not JSON, no key) is parked in the database with the reason, and its
offset is committed like any other: the consumer never stops, and never loops on
one message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord  # type: ignore[import-untyped]
from aiokafka.errors import CommitFailedError  # type: ignore[import-untyped]

from hipq.config import KafkaConfig
from hipq.events import Events
from hipq.ingest.response_intake import ResponseRefused, check_body, new_response
from hipq.ingest.response_writer import emit_stored
from hipq.outcome_rules import OutcomeRule, OutcomeRuleError, rule_for
from hipq.store import NewResponse, ParkedMessage, Store
from hipq.store.schema import KEY_MAX_LENGTH
from hipq.templates import KAFKA_RESPONSE_ROOTS, KeyTemplate, TemplateError, compile_template
from hipq.transports.kafka_client import client_options, close_quietly, reconnect_backoff

log = logging.getLogger("hipq.process.kafka_consumer")

_PREVIEW_BYTES = 4096  # of an oversized message kept in its parked row
_MAX_REASON_CHARS = 500
_RETRY_PAUSE = 0.5  # seconds before a message that failed to store is tried once more


class ConsumerConfigError(ValueError):
    """A response source in the config that cannot work; the message names its key."""


@dataclass(frozen=True, slots=True)
class _Source:
    topic: str
    key: KeyTemplate
    rule: OutcomeRule


_Item = tuple[ConsumerRecord, NewResponse | ParkedMessage]  # a message and what it became


class _StoreFailed(Exception):
    """Storing a batch failed; the consumer was moved back to re-read it."""


def compile_sources(kafka: KafkaConfig) -> dict[str, _Source]:
    sources: dict[str, _Source] = {}
    for i, src in enumerate(kafka.responses):
        where = f"kafka.responses.{i}"
        if src.topic in sources:
            raise ConsumerConfigError(f"{where}.topic: {src.topic!r} is listed twice")
        try:
            key = compile_template(src.key, KAFKA_RESPONSE_ROOTS)
        except TemplateError as exc:
            raise ConsumerConfigError(f"{where}.key: {exc}") from None
        try:
            rule = rule_for(src.outcome)
        except OutcomeRuleError as exc:
            raise ConsumerConfigError(f"{where}.outcome: {exc}") from None
        sources[src.topic] = _Source(src.topic, key, rule)
    return sources


class ResponseConsumer:
    def __init__(
        self,
        kafka: KafkaConfig,
        store: Store,
        clock: Callable[[], datetime],
        ttl_seconds: float,
        on_stored: Callable[[], None],
        *,
        poll_timeout_ms: int = 1000,
        max_records: int = 1000,
        probe_interval: float = 10.0,
        consumer_options: Mapping[str, Any] | None = None,
        events: Events | None = None,
    ) -> None:
        self._kafka, self._store, self._clock = kafka, store, clock
        self._events = events or Events()
        self._ttl, self._on_stored = ttl_seconds, on_stored
        self._sources = compile_sources(kafka)
        self._poll_timeout_ms, self._max_records = poll_timeout_ms, max_records
        self._probe_interval = probe_interval
        self._options = dict(consumer_options or {})
        self._consumer: AIOKafkaConsumer | None = None
        self._broker_ok = False  # the last probe (or the join) reached the broker
        self._store_ok = True  # the last batch was stored
        self._careful = False  # the last batch failed to store: store one by one
        self._lock = asyncio.Lock()
        self._runner: asyncio.Task[None] | None = None

    @property
    def ready(self) -> bool:
        if not self._sources:
            return True
        return self._consumer is not None and self._broker_ok and self._store_ok

    async def start(self) -> None:
        """Return at once; the consumer connects and polls in the background."""
        if self._runner is None and self._sources:
            self._runner = asyncio.create_task(self._run(), name="hipq-kafka-consumer")

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
            self._runner = None
        async with self._lock:
            await self._disconnect()

    async def run_once(self, timeout_ms: int = 1000) -> int:
        """Poll one batch, store it, commit its offsets; return the messages handled."""
        async with self._lock:
            consumer = await self._connected()
            batch = await consumer.getmany(timeout_ms=timeout_ms, max_records=self._max_records)
            if not batch:
                return 0
            items: list[_Item] = [
                (m, self._convert_safely(m)) for messages in batch.values() for m in messages
            ]
            try:
                stored, parked = await self._save(items)
            except Exception as exc:
                # Nothing of the batch is committed: read it again from its start.
                for tp, messages in batch.items():
                    try:
                        consumer.seek(tp, messages[0].offset)
                    except Exception:  # revoked meanwhile: its next owner re-reads it
                        log.debug("cannot seek %s back", tp)
                self._careful, self._store_ok = True, False
                raise _StoreFailed(f"storing {len(items)} kafka messages failed: {exc!r}") from exc
            self._careful, self._store_ok = False, True
            emit_stored(self._events, stored)
            for source, count in Counter(p.source for p in parked).items():
                self._events.emit("responses_parked", source=source, count=count)
            for p in parked:  # its key and value stay out of events (and so of logs)
                self._events.emit(
                    "response_parked",
                    source=p.source,
                    reason=p.reason,
                    partition=p.partition,
                    offset=p.offset,
                )
            # A partition revoked by a rebalance meanwhile is re-read by its next owner
            # from the last commit: its copies become duplicates in the inbox, never losses.
            assigned = consumer.assignment()
            offsets = {tp: ms[-1].offset + 1 for tp, ms in batch.items() if tp in assigned}
            try:
                if offsets:
                    await consumer.commit(offsets)
            except CommitFailedError as exc:
                log.warning("kafka offsets not committed, the group rebalanced: %r", exc)
            finally:
                if any(isinstance(item, NewResponse) for _m, item in items):
                    self._on_stored()
            return len(items)

    # -- storing ------------------------------------------------------------------

    async def _save(self, items: list[_Item]) -> tuple[list[NewResponse], list[ParkedMessage]]:
        """Store the batch's responses and park its bad messages; what went where."""
        now = self._clock()
        new = [i for _m, i in items if isinstance(i, NewResponse)]
        parked = [i for _m, i in items if isinstance(i, ParkedMessage)]
        if not self._careful:
            await self._store.response_insert_many(new, now, self._ttl, parked)
            return new, parked
        # The previous try of this batch failed. If one message is what the database
        # refuses, storing one by one finds it and parks it: the rest goes on. If the
        # database itself is down, parking fails too and the batch waits for it.
        new, parked = [], []
        for msg, item in items:
            if isinstance(item, ParkedMessage):
                await self._store.response_insert_many([], now, self._ttl, [item])
                parked.append(item)
            elif (refused := await self._store_or_park(msg, item, now)) is not None:
                parked.append(refused)
            else:
                new.append(item)
        return new, parked

    async def _store_or_park(
        self, msg: ConsumerRecord, item: NewResponse, now: datetime
    ) -> ParkedMessage | None:
        """Store ``item``; if the database keeps refusing it, park it (returned)."""
        error: Exception | None = None
        for attempt in range(2):
            if attempt:
                await asyncio.sleep(_RETRY_PAUSE)  # a passing lock is not the message's fault
            try:
                await self._store.response_insert_many([item], now, self._ttl)
                return None
            except Exception as exc:
                error = exc
                log.warning(
                    "kafka message %s:%s/%s not stored: %r",
                    msg.topic,
                    msg.partition,
                    msg.offset,
                    exc,
                )
        reason = _clean(f"could not be stored: {error}"[:_MAX_REASON_CHARS])
        parked = ParkedMessage(
            item.source, reason, msg.partition, msg.offset, _text(msg.key), _text(msg.value)
        )
        await self._store.response_insert_many([], now, self._ttl, [parked])
        return parked

    def _convert_safely(self, msg: ConsumerRecord) -> NewResponse | ParkedMessage:
        try:
            return self._convert(msg)
        except Exception as exc:  # a bug must not stop the consumer on this message
            log.exception("kafka message %s:%s/%s", msg.topic, msg.partition, msg.offset)
            reason = _clean(f"cannot be read: {exc!r}"[:_MAX_REASON_CHARS])
            return ParkedMessage(
                f"kafka:{msg.topic}",
                reason,
                msg.partition,
                msg.offset,
                _text(msg.key),
                _text((msg.value or b"")[:_PREVIEW_BYTES]),
            )

    def _convert(self, msg: ConsumerRecord) -> NewResponse | ParkedMessage:
        source = self._sources[msg.topic]
        name = f"kafka:{msg.topic}"
        raw_key, raw_value = msg.key, msg.value

        def park(reason: str, value: bytes | None = raw_value) -> ParkedMessage:
            return ParkedMessage(
                name, reason, msg.partition, msg.offset, _text(raw_key), _text(value)
            )

        size = len(raw_value or b"") + len(raw_key or b"")
        limit = self._kafka.max_message_bytes
        if size > limit:
            return park(
                f"message of {size} bytes is over max_message_bytes ({limit})",
                (raw_value or b"")[:_PREVIEW_BYTES],
            )
        if raw_value is None:
            return park("message has no value")
        try:
            text = raw_value.decode("utf-8")
        except UnicodeDecodeError as exc:
            return park(f"value is not UTF-8 text ({exc.reason} at byte {exc.start})")
        try:
            body = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return park(f"value is not JSON: {exc}")
        try:
            check_body(body, "value")
        except ResponseRefused:
            return park("value holds a NUL character (\\u0000), which the database cannot store")
        headers = {k: v for k, v in (msg.headers or ())}  # a repeated header: the last wins
        context = {"key": raw_key, "value": body, "headers": headers, "topic": msg.topic}
        try:
            key = source.key.render(context)
        except TemplateError as exc:
            return park(f"no correlation key from {source.key.text!r}: {exc}")
        shown = {_clean(k): _clean(_text(v) or "") for k, v in headers.items()}
        try:
            return new_response(
                key, body, source=name, rule=source.rule, headers=headers, kept_headers=shown
            )
        except ResponseRefused:
            return park(f"correlation key is over {KEY_MAX_LENGTH} characters or holds a NUL")

    # -- the connection -----------------------------------------------------------

    async def _connected(self) -> AIOKafkaConsumer:
        if self._consumer is not None:
            return self._consumer
        consumer = AIOKafkaConsumer(
            *self._sources,
            **client_options(self._kafka),
            group_id=self._kafka.group_id,
            enable_auto_commit=False,  # committed by hand, after the DB commit
            auto_offset_reset="earliest",  # a new group reads what is already there
            metadata_max_age_ms=30_000,  # notice new partitions and topics within 30s
            **self._options,
        )
        try:
            await asyncio.wait_for(consumer.start(), 60.0)
        except BaseException:
            await close_quietly(consumer)
            raise
        self._consumer, self._broker_ok = consumer, True
        log.info(
            "kafka consumer joined group %s on %s", self._kafka.group_id, ", ".join(self._sources)
        )
        return consumer

    async def _disconnect(self) -> None:
        consumer, self._consumer, self._broker_ok = self._consumer, None, False
        if consumer is not None:
            await close_quietly(consumer)

    async def _run(self) -> None:
        backoff = reconnect_backoff()
        next_probe = time.monotonic() + self._probe_interval
        while True:
            try:
                await self.run_once(self._poll_timeout_ms)
                if time.monotonic() >= next_probe:
                    await self._probe()
                    # While the broker is away, look again soon: /readyz should recover fast.
                    wait = self._probe_interval if self._broker_ok else 2.0
                    next_probe = time.monotonic() + min(wait, self._probe_interval)
                backoff.reset()
                continue
            except asyncio.CancelledError:
                raise
            except _StoreFailed as exc:
                log.warning("%s; retrying", exc)
            except Exception as exc:
                log.warning(
                    "kafka consumer on %s failed: %r; reconnecting",
                    self._kafka.bootstrap_servers,
                    exc,
                )
                async with self._lock:
                    await self._disconnect()
            await asyncio.sleep(backoff.next())

    async def _probe(self) -> None:
        """getmany stays quiet while the broker is away: ask it something instead."""
        consumer = self._consumer
        if consumer is None:
            return
        try:
            await asyncio.wait_for(consumer.topics(), 5.0)
        except asyncio.CancelledError:
            raise
        except Exception:
            if self._broker_ok:
                log.warning("kafka consumer lost %s", self._kafka.bootstrap_servers)
            self._broker_ok = False
            return
        self._broker_ok = True


def _text(raw: bytes | None) -> str | None:
    """Bytes as text a database accepts, for an operator to read."""
    if raw is None:
        return None
    return _clean(raw.decode("utf-8", errors="backslashreplace"))


def _clean(text: str) -> str:
    # PostgreSQL text cannot hold NUL.
    return text.replace("\x00", "\\x00")
