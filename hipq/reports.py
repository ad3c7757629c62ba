"""What transports reported to a queue's loop between two ticks, and the settlements
a tick makes of it (with correlated responses, cancel requests and deadlines)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hipq.jobs import Job
from hipq.outcomes import Cancelled, Failed, Outcome, Settlement, settle
from hipq.plugins import RetryStrategies
from hipq.retry import AttemptError

log = logging.getLogger("hipq.loop")


@dataclass(slots=True)
class Reports:
    """What transports reported since the last tick (swapped out whole each tick)."""

    outcomes: dict[tuple[int, int], Outcome] = field(default_factory=dict)
    sent: set[tuple[int, int]] = field(default_factory=set)
    deadlines: dict[int, datetime] = field(default_factory=dict)
    payloads: dict[int, dict[str, Any]] = field(default_factory=dict)

    def merge_back(self, newer: Reports) -> None:
        """Put a failed tick's reports back in front of what arrived meanwhile."""
        self.outcomes = {**self.outcomes, **newer.outcomes}
        self.sent |= newer.sent
        self.deadlines.update(newer.deadlines)
        self.payloads.update(newer.payloads)


def settlements(
    reports: Reports,
    in_flight: Mapping[int, Job],
    cancels: list[int],
    matched: Mapping[int, tuple[int, Outcome]],
    retry: RetryStrategies,
    now: datetime,
) -> list[Settlement]:
    """The in-flight jobs that reach an outcome this tick, settled by their strategy."""
    outcomes: dict[int, Outcome] = {}
    for (job_id, attempt), outcome in reports.outcomes.items():
        job = in_flight.get(job_id)
        if job is not None and job.attempt == attempt:  # else: stale, already settled
            outcomes[job_id] = outcome
    # A correlated response wins over what the transport said of the send.
    for job_id, (_response_id, outcome) in matched.items():
        outcomes[job_id] = outcome
    for job_id in cancels:
        if job_id in in_flight:
            outcomes[job_id] = Cancelled()
    for job in in_flight.values():
        if job.id not in outcomes and job.deadline is not None and job.deadline <= now:
            if job.id in reports.deadlines and reports.deadlines[job.id] > now:
                continue  # a heartbeat arrived in time
            took = job.timeout_seconds
            outcomes[job.id] = Failed(AttemptError(f"timed out after {took:g}s", "timeout"))
    out = []
    for job_id, outcome in outcomes.items():
        job = in_flight[job_id]
        if job_id in reports.payloads:
            job = job._replace(payload=reports.payloads[job_id])
        out.append(settle(job, outcome, _strategy(retry, job), now))
    return out


def _strategy(retry: RetryStrategies, job: Job) -> Any:
    try:
        return retry.get(job.retry)
    except Exception:  # a config that no longer loads: fall back to the default
        log.exception("job %s: retry config %r does not load", job.id, job.retry)
        return retry.get({"strategy": "exponential"})
