"""The seam between the queue loop and the ways a job's request leaves hipq."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from hipq.jobs import Job
from hipq.outcomes import Outcome


class Reporter(Protocol):
    """What a transport tells the loop. Calls are cheap: they queue for the next tick."""

    def outcome(self, job: Job, outcome: Outcome) -> None: ...

    def sent(self, job: Job) -> None:
        """The request left; the job now waits for its correlated response."""

    def heartbeat(self, job: Job, deadline: datetime) -> None: ...

    def checkpoint(self, job: Job, payload: dict[str, Any]) -> None: ...


class Transport(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def dispatch(self, job: Job, reporter: Reporter) -> None:
        """Start sending ``job`` without blocking the loop; report through ``reporter``."""

    def abandon(self, job_id: int) -> None:
        """The loop settled the job (timeout, cancel): stop working on it if still busy."""
