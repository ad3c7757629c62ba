"""Optional OpenTelemetry traces that follow a job across the external hop.

- the enqueue (``POST /v1/jobs`` and ``/v1/jobs/batch``) is a span, a child of the
  caller's ``traceparent`` if it sent one; its context is stored on each job it
  created (``hipq_jobs.trace_context``);
- each attempt is a span of its own trace, *linked* to the enqueue's (not its child:
  an attempt may run days later, in another process); it lasts from the dispatch to
  the send (or to the outcome, for a transport that returns one);
- the outgoing HTTP request and Kafka message carry the attempt's ``traceparent``;
- a callback or response message that carries it back is a span linked to the
  attempt.

Installed with the ``hipq[otel]`` extra and configured only through the standard
``OTEL_*`` variables (``OTEL_SERVICE_NAME``, ``OTEL_TRACES_EXPORTER``,
``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SDK_DISABLED``, ...). Without the extra, or
until ``enable`` is called, every function here returns at once and hipq imports
nothing of ``opentelemetry`` (FastAPI depends on the API package and imports it
itself; the SDK is the extra's).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hipq.jobs import Job, NewJob

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from hipq.store import NewResponse

log = logging.getLogger("hipq.observability.tracing")

TRACEPARENT = "traceparent"
_tracer: Tracer | None = None


def installed() -> bool:
    """Whether the SDK of the ``hipq[otel]`` extra is importable."""
    try:
        return importlib.util.find_spec("opentelemetry.sdk") is not None
    except (ImportError, ValueError):
        return False


def enabled() -> bool:
    return _tracer is not None


def enable(provider: TracerProvider | None = None) -> None:
    """Trace through ``provider`` (default: the global one)."""
    global _tracer
    from opentelemetry import trace

    from hipq.version import __version__

    provider = provider or trace.get_tracer_provider()
    _tracer = provider.get_tracer("hipq", __version__)


def disable() -> None:
    global _tracer
    _tracer = None


# Any of these set asks for traces; with none, an installed extra stays quiet rather
# than send spans to an OTLP collector on localhost that nobody runs.
ASKING = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def configure_from_env() -> bool:
    """At ``hipq serve``, with the extra installed and ``OTEL_SDK_DISABLED`` not true:
    trace through the tracer provider already set (``opentelemetry-instrument hipq
    serve``), or else, when an ``OTEL_*`` variable of ``ASKING`` is set, through one
    set up here from the ``OTEL_*`` variables."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or not installed():
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider as SdkProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if not isinstance(trace.get_tracer_provider(), SdkProvider):
        if not any(os.environ.get(name) for name in ASKING):
            return False
        names = os.environ.get("OTEL_TRACES_EXPORTER") or "otlp"
        exporters = [n.strip() for n in names.split(",") if n.strip() and n.strip() != "none"]
        if not exporters:
            return False
        resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "hipq"}))
        provider = SdkProvider(resource=resource)
        for name in exporters:
            provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
        trace.set_tracer_provider(provider)
    enable()
    return True


def _exporter(name: str) -> Any:
    """The span exporter an ``OTEL_TRACES_EXPORTER`` name stands for: the entry point
    the exporter packages register, as the SDK's own auto-configuration finds it."""
    from importlib.metadata import entry_points

    found = entry_points(group="opentelemetry_traces_exporter", name=name)
    if not found:
        raise RuntimeError(
            f"OTEL_TRACES_EXPORTER={name}: no such exporter installed"
            " (pip install 'hipq[otel]' brings otlp; console is the SDK's)"
        )
    return next(iter(found)).load()()


# -- the enqueue ------------------------------------------------------------------------


@contextlib.contextmanager
def enqueue_span(headers: Mapping[str, str], jobs: Sequence[NewJob]) -> Iterator[Sequence[NewJob]]:
    """Around the insert of ``jobs``: the enqueue's span (a child of the caller's
    ``traceparent`` in ``headers``); yields the jobs carrying its context."""
    if _tracer is None:
        yield jobs
        return
    from opentelemetry import propagate, trace

    # Under FastAPI's own request span (it traces when a provider is set) the enqueue is
    # its child; else a child of the caller's traceparent, if it sent one.
    current = trace.get_current_span().get_span_context().is_valid
    parent = None if current else propagate.extract(headers)
    queues = sorted({j.queue for j in jobs})
    types = sorted({j.type for j in jobs})
    attributes: dict[str, str | int] = {
        "messaging.system": "hipq",
        "messaging.operation.type": "send",
        "messaging.batch.message_count": len(jobs),
        "hipq.queue": queues[0] if len(queues) == 1 else ",".join(queues),
        "hipq.job.type": types[0] if len(types) == 1 else ",".join(types),
    }
    with _tracer.start_as_current_span(
        "hipq enqueue", context=parent, kind=trace.SpanKind.PRODUCER, attributes=attributes
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        context = carrier.get(TRACEPARENT)
        yield [replace(j, trace_context=context) for j in jobs] if context else jobs


# -- attempts -----------------------------------------------------------------------------


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current attempt's ``traceparent`` (and ``tracestate``) to ``headers``."""
    if _tracer is None:
        return
    from opentelemetry import propagate

    propagate.inject(headers)


def start_attempt(job: Job) -> Span:
    """A new span for ``job``'s attempt, linked to its enqueue's (tracing on)."""
    from opentelemetry import propagate, trace

    links = []
    if job.trace_context:
        enqueue = trace.get_current_span(propagate.extract({TRACEPARENT: job.trace_context}))
        if enqueue.get_span_context().is_valid:
            links.append(trace.Link(enqueue.get_span_context(), {"hipq.link": "enqueue"}))
    assert _tracer is not None
    return _tracer.start_span(
        f"hipq attempt {job.type}",
        context=trace.set_span_in_context(trace.INVALID_SPAN),  # a trace of its own
        kind=trace.SpanKind.PRODUCER,
        links=links,
        attributes={
            "messaging.system": "hipq",
            "hipq.job.id": job.id,
            "hipq.job.type": job.type,
            "hipq.queue": job.queue,
            "hipq.job.attempt": job.attempt,
        },
    )


def finish_attempt(span: Span, error: str | None) -> None:
    from opentelemetry.trace import Status, StatusCode

    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


# -- responses ----------------------------------------------------------------------------


def responses_received(responses: Sequence[NewResponse]) -> None:
    """A span per stored response that carries a ``traceparent`` back, linked to the
    attempt it answers (its key and body stay out of the span)."""
    if _tracer is None:
        return
    from opentelemetry import propagate, trace

    for response in responses:
        value = (response.headers or {}).get(TRACEPARENT)
        if not value:
            continue
        attempt = trace.get_current_span(propagate.extract({TRACEPARENT: value}))
        context = attempt.get_span_context()
        if not context.is_valid:
            continue
        span = _tracer.start_span(
            "hipq response",
            context=trace.set_span_in_context(trace.INVALID_SPAN),
            kind=trace.SpanKind.CONSUMER,
            links=[trace.Link(context, {"hipq.link": "attempt"})],
            attributes={
                "messaging.system": "hipq",
                "hipq.response.source": response.source,
                "hipq.response.succeeded": response.succeeded,
            },
        )
        span.end()
