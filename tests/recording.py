"""A transport that only records: loop tests dispatch to it and report each job's
send or outcome themselves, tick by tick, with no handler tasks and no sleeps."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from hipq.jobs import Job
from hipq.outcomes import Failed, Outcome, Succeeded
from hipq.retry import AttemptError
from hipq.transports.base import Reporter


class RecordingTransport:
    """Keeps every dispatched job and its reporter; ``succeed``, ``fail``, ``sent``
    and ``report`` tell the loop what became of a job, as a real transport would."""

    def __init__(self) -> None:
        self.dispatched: list[Job] = []  # in dispatch order, once per dispatch
        self.abandoned: list[int] = []
        self._open: dict[int, tuple[Job, Reporter]] = {}

    @property
    def ready(self) -> bool:
        return True

    @property
    def busy(self) -> int:
        return len(self._open)

    @property
    def open_ids(self) -> list[int]:
        """Jobs dispatched and not reported on or abandoned, in dispatch order."""
        return list(self._open)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        self._open.clear()

    def dispatch(self, job: Job, reporter: Reporter) -> None:
        self.dispatched.append(job)
        self._open[job.id] = (job, reporter)

    def abandon(self, job_id: int) -> None:
        if self._open.pop(job_id, None) is not None:
            self.abandoned.append(job_id)

    def report(self, job_id: int, outcome: Outcome) -> None:
        job, reporter = self._open.pop(job_id)
        reporter.outcome(job, outcome)

    def succeed(self, job_id: int, result: Any = None) -> None:
        self.report(job_id, Succeeded(result))

    def fail(self, job_id: int, message: str = "failed", retryable: bool = True) -> None:
        self.report(job_id, Failed(AttemptError(message, retryable=retryable)))

    def sent(self, job_id: int) -> None:
        """The request left: the job now waits for its correlated response."""
        job, reporter = self._open[job_id]
        reporter.sent(job)

    def heartbeat(self, job_id: int, deadline: datetime) -> None:
        job, reporter = self._open[job_id]
        reporter.heartbeat(job, deadline)
