"""OpenTelemetry traces across the external hop, with the SDK's in-memory exporter:
the enqueue is a span (a child of the caller's traceparent), each attempt a span of
its own linked to it, the outgoing request carries the attempt's traceparent, and a
callback or response message that carries it back is a span linked to the attempt."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hipq.observability import tracing
from hipq.transports.traced import traced
from tests.api.conftest import open_api
from tests.peers import serve_app
from tests.support import eventually

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    try:
        yield exporter
    finally:
        tracing.disable()
        provider.shutdown()


class Peer:
    """An external HTTP service that accepts hipq's request (202) and keeps its headers."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.app = Starlette(routes=[Route("/charges", self._charge, methods=["POST"])])

    async def _charge(self, request: Request) -> JSONResponse:
        self.headers.append(dict(request.headers))
        return JSONResponse({"accepted": True}, status_code=202)


@pytest.fixture
async def peer() -> AsyncIterator[tuple[Peer, str]]:
    p = Peer()
    async with serve_app(p.app) as base:
        yield p, base


def one(spans: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = [s for s in spans.get_finished_spans() if s.name == name]
    return span


def traceparent_of(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


async def test_an_http_job_is_traced_from_enqueue_through_its_callback(
    database_url: str, spans: InMemorySpanExporter, peer: tuple[Peer, str]
) -> None:
    external, base = peer
    charge = {
        "correlation_key": "{payload.order_id}",
        "outcome": {"field": "status", "success": ["ok"]},
        "transport": {"http": {"url": f"{base}/charges", "timeout": "5s"}},
    }
    async with open_api(database_url, job_types={"charge": charge}) as api:
        posted = await api.client.post(
            "/v1/jobs",
            json={"type": "charge", "payload": {"order_id": "A-17", "card": "4111"}},
            headers={"traceparent": CALLER},
        )
        assert posted.status_code == 201, posted.text
        job_id = posted.json()["id"]

        # The enqueue: a child of the caller's span, kept on the job.
        enqueue = one(spans, "hipq enqueue")
        assert enqueue.parent is not None
        assert (f"{enqueue.context.trace_id:032x}", f"{enqueue.parent.span_id:016x}") == (
            CALLER_TRACE,
            CALLER_SPAN,
        )
        assert enqueue.kind == SpanKind.PRODUCER
        assert enqueue.attributes is not None
        assert enqueue.attributes["hipq.queue"] == "default"
        stored = await api.service.store.job_get(job_id)
        assert stored.trace_context == traceparent_of(enqueue)

        # The attempt: a trace of its own, linked to the enqueue; the request carries it.
        async def sent() -> bool:
            await api.tick(ticks=1)
            return (await api.job(job_id))["state"] == "awaiting"

        await eventually(sent)
        attempt = one(spans, "hipq attempt charge")
        assert attempt.parent is None
        assert attempt.context.trace_id != enqueue.context.trace_id
        [link] = attempt.links
        assert link.context.span_id == enqueue.context.span_id
        assert link.context.trace_id == enqueue.context.trace_id
        assert attempt.attributes is not None
        assert (attempt.attributes["hipq.job.id"], attempt.attributes["hipq.job.attempt"]) == (
            job_id,
            1,
        )
        [request_headers] = external.headers
        assert request_headers["traceparent"] == traceparent_of(attempt)

        # The callback carries it back: a span linked to the attempt.
        callback = await api.client.post(
            "/v1/callbacks/A-17?type=charge",
            json={"status": "ok"},
            headers={"traceparent": request_headers["traceparent"]},
        )
        assert callback.status_code == 202, callback.text
        response = one(spans, "hipq response")
        [link] = response.links
        assert (link.context.trace_id, link.context.span_id) == (
            attempt.context.trace_id,
            attempt.context.span_id,
        )
        await api.tick()
        assert (await api.job(job_id))["state"] == "completed"
    # No payload, body or key in any span's attributes.
    for span in spans.get_finished_spans():
        assert "4111" not in repr(dict(span.attributes or {}))
        assert "A-17" not in repr(dict(span.attributes or {}))


async def test_an_enqueue_without_a_caller_starts_a_trace_and_failed_attempts_say_so(
    database_url: str, spans: InMemorySpanExporter
) -> None:
    async with open_api(database_url) as api:
        batch = await api.client.post(
            "/v1/jobs/batch", json={"jobs": [{"type": "permanent"}, {"type": "permanent"}]}
        )
        assert batch.status_code == 201, batch.text
        enqueue = one(spans, "hipq enqueue")
        assert enqueue.parent is None
        assert enqueue.attributes is not None
        assert enqueue.attributes["messaging.batch.message_count"] == 2
        await api.tick()
        attempts = [s for s in spans.get_finished_spans() if s.name == "hipq attempt permanent"]
        assert len(attempts) == 2
        for attempt in attempts:
            assert [link.context.span_id for link in attempt.links] == [enqueue.context.span_id]
            assert not attempt.status.is_ok
            assert "will never work" in (attempt.status.description or "")


async def test_without_tracing_jobs_carry_no_context_and_requests_no_traceparent(
    database_url: str, peer: tuple[Peer, str]
) -> None:
    external, base = peer
    charge = {
        "correlation_key": "{payload.order_id}",
        "transport": {"http": {"url": f"{base}/charges", "timeout": "5s"}},
    }
    async with open_api(database_url, job_types={"charge": charge}) as api:
        posted = await api.post_job(type="charge", payload={"order_id": "B-1"})
        assert (await api.service.store.job_get(posted["id"])).trace_context is None

        async def sent() -> bool:
            await api.tick(ticks=1)
            return bool(external.headers)

        await eventually(sent)
        assert "traceparent" not in external.headers[0]


def test_without_the_extra_hipq_serves_and_imports_no_sdk() -> None:
    # The extra missing: its SDK cannot be imported (the API is FastAPI's dependency).
    code = (
        "import sys; sys.modules['opentelemetry.sdk'] = None\n"
        "import hipq.commands.main, hipq.process.wiring, hipq.app\n"
        "from hipq.observability import tracing\n"
        "print(tracing.installed(), tracing.configure_from_env(), tracing.enabled(),"
        " sorted(m for m, v in sys.modules.items() if m.startswith('opentelemetry.sdk') and v))"
    )
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out.strip() == "False False False []", out
    # Installed but not set up (no `hipq serve`): importing hipq loads no SDK either.
    code = (
        "import sys, hipq.commands.main, hipq.process.wiring, hipq.app\n"
        "import hipq.observability.tracing\n"
        + ("print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))")
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out


def _env_provider(preset: str = "", **env: Any) -> str:
    code = preset + (
        "from hipq.observability import tracing; from opentelemetry import trace;"
        "print(tracing.configure_from_env(), tracing.enabled(),"
        " type(trace.get_tracer_provider()).__name__)"
    )
    full = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | env
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full, check=True
    )
    return result.stdout.strip()


def test_the_sdk_is_set_up_from_the_standard_otel_variables() -> None:
    assert _env_provider(OTEL_TRACES_EXPORTER="console") == "True True TracerProvider"
    assert _env_provider(OTEL_SDK_DISABLED="true") == "False False ProxyTracerProvider"
    assert _env_provider(OTEL_TRACES_EXPORTER="none") == "False False ProxyTracerProvider"
    # Nothing asks for traces: an installed extra sends nothing anywhere.
    assert _env_provider() == "False False ProxyTracerProvider"
    # A provider set up before (as opentelemetry-instrument does) is used as it is.
    preset = (
        "from opentelemetry import trace; from opentelemetry.sdk.trace import TracerProvider;"
        "trace.set_tracer_provider(TracerProvider());"
    )
    assert _env_provider(preset=preset) == "True True TracerProvider"


# -- Kafka: the request message carries the attempt, a response message links back --------


@pytest.mark.kafka
async def test_a_kafka_message_carries_the_attempt_and_its_response_links_back(
    kafka_bootstrap: str, store: Any, spans: InMemorySpanExporter
) -> None:
    from aiokafka import AIOKafkaProducer

    from hipq.config import JobTypeConfig, KafkaConfig
    from hipq.job_types import JobTypeInfo
    from hipq.process.kafka_consumer import ResponseConsumer
    from hipq.transports.kafka import KafkaTransport
    from tests.services import FAST_CONSUMER_GROUP_KWARGS
    from tests.support import FakeClock, Recorder
    from tests.transports.test_kafka import job, read_all, unique

    requests, replies = unique("orders"), unique("replies")
    config = JobTypeConfig.model_validate({"transport": {"kafka": {"topic": requests}}})
    kafka = KafkaTransport(
        KafkaConfig(bootstrap_servers=kafka_bootstrap),
        {"order": JobTypeInfo("order", config, None)},
        FakeClock(),
    )
    [transport] = traced({"order": kafka}).values()
    enqueued = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    await transport.start()
    try:
        await eventually(lambda: transport.ready)
        reporter = Recorder()
        transport.dispatch(job("order", trace_context=enqueued), reporter)  # type: ignore[arg-type]
        await eventually(lambda: reporter.calls)
        assert [c[0] for c in reporter.calls] == ["sent"]
    finally:
        await transport.stop()
    attempt = one(spans, "hipq attempt order")
    [link] = attempt.links
    assert f"{link.context.trace_id:032x}" == "4bf92f3577b34da6a3ce929d0e0e4736"
    [message] = await read_all(kafka_bootstrap, requests, 1)
    carried = dict(message.headers)["traceparent"].decode()
    assert carried == traceparent_of(attempt)

    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(
            replies,
            key=b"A-17:2",
            value=b'{"status": "ok"}',
            headers=[("traceparent", carried.encode())],
        )
    finally:
        await producer.stop()
    consumer = ResponseConsumer(
        KafkaConfig(
            enabled=True,
            bootstrap_servers=kafka_bootstrap,
            group_id=unique("g"),
            responses=[{"topic": replies, "key": "{key}"}],
        ),
        store,
        FakeClock(),
        3600.0,
        lambda: None,
        consumer_options=FAST_CONSUMER_GROUP_KWARGS,
    )
    try:
        handled = 0
        for _ in range(50):
            handled += await consumer.run_once(timeout_ms=300)
            if handled:
                break
        assert handled == 1
    finally:
        await consumer.stop()
    response = one(spans, "hipq response")
    [link] = response.links
    assert (link.context.trace_id, link.context.span_id) == (
        attempt.context.trace_id,
        attempt.context.span_id,
    )
    assert response.attributes is not None
    assert response.attributes["hipq.response.source"] == f"kafka:{replies}"


def test_serve_refuses_an_exporter_that_is_not_installed(tmp_path: Any) -> None:
    from tests.test_cli import HIPQ, REPO, _env, free_port, write_config

    config = write_config(tmp_path / "hipq.yaml", tmp_path / "hipq.db")
    result = subprocess.run(
        [HIPQ, "serve", "--config", str(config), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env={**_env(), "OTEL_TRACES_EXPORTER": "nonesuch"},
        cwd=REPO,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: OpenTelemetry: OTEL_TRACES_EXPORTER=nonesuch: no such exporter installed"
        " (pip install 'hipq[otel]' brings otlp; console is the SDK's)"
    ]
    assert not (tmp_path / "hipq.db").exists()
