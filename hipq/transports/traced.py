"""Transports wrapped so that every dispatch is an attempt's span, when tracing is on
(``hipq.observability.tracing``, which starts and ends the spans)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hipq.jobs import Job
from hipq.observability import tracing
from hipq.outcomes import Failed, Outcome
from hipq.transports.base import Reporter, Transport

if TYPE_CHECKING:
    from opentelemetry.trace import Span


def traced(transports: dict[str, Transport]) -> dict[str, Transport]:
    """Each transport wrapped so that every dispatch is an attempt's span (tracing on)."""
    if not tracing.enabled():
        return transports
    wrapped: dict[int, Transport] = {}
    return {
        name: wrapped.setdefault(id(t), TracedTransport(t))  # type: ignore[arg-type]
        for name, t in transports.items()
    }


class TracedTransport:
    """A transport whose dispatch runs inside the attempt's span: the task it starts
    copies the context, so ``inject`` in the transport finds the span."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self._spans: dict[int, Span] = {}

    def dispatch(self, job: Job, reporter: Reporter) -> None:
        from opentelemetry import trace

        span = tracing.start_attempt(job)
        self._end(job.id)  # a resumed dispatch of the same job replaces its span
        self._spans[job.id] = span
        with trace.use_span(span, end_on_exit=False):
            self.inner.dispatch(job, SpanReporter(reporter, self, job.id))

    def abandon(self, job_id: int) -> None:
        self._end(job_id, "abandoned")
        self.inner.abandon(job_id)

    def _end(self, job_id: int, error: str | None = None) -> None:
        span = self._spans.pop(job_id, None)
        if span is not None:
            tracing.finish_attempt(span, error)

    @property
    def ready(self) -> bool:
        return self.inner.ready

    @property
    def busy(self) -> int:
        return self.inner.busy

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()
        for job_id in list(self._spans):
            self._end(job_id, "stopped")

    def __getattr__(self, name: str) -> Any:  # callback_url and the like
        return getattr(self.inner, name)


class SpanReporter:
    """Passes reports on to the loop, ending the attempt's span at the send or outcome."""

    def __init__(self, inner: Reporter, owner: TracedTransport, job_id: int) -> None:
        self.inner, self.owner, self.job_id = inner, owner, job_id

    def sent(self, job: Job) -> None:
        self.owner._end(self.job_id)
        self.inner.sent(job)

    def outcome(self, job: Job, outcome: Outcome) -> None:
        error = outcome.error.message if isinstance(outcome, Failed) else None
        self.owner._end(self.job_id, error)
        self.inner.outcome(job, outcome)

    def __getattr__(self, name: str) -> Any:  # heartbeat, checkpoint
        return getattr(self.inner, name)
