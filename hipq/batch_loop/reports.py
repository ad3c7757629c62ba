"""What transports reported to a queue's loop between two ticks: the settlements a
tick makes of it (with correlated responses, cancel requests and deadlines), how the
tick writes it, and how the loop's in-flight view follows once the tick committed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.operator_requests import OperatorRequest
from hipq.outcomes import Failed, Outcome, Settlement, settle
from hipq.plugins import RetryStrategies
from hipq.retry import AttemptError
from hipq.store import QueueBatch
from hipq.store.requests import attempts_give_back, requests_finish, retry_settings

log = logging.getLogger("hipq.batch_loop.loop")


@dataclass(slots=True)
class Reports:
    """What transports reported since the last tick (swapped out whole each tick)."""

    outcomes: dict[tuple[int, int], Outcome] = field(default_factory=dict)
    sent: set[tuple[int, int]] = field(default_factory=set)
    deadlines: dict[int, datetime] = field(default_factory=dict)
    payloads: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.outcomes or self.sent or self.deadlines or self.payloads)

    def merge_back(self, newer: Reports) -> None:
        """Put a failed tick's reports back in front of what arrived meanwhile."""
        self.outcomes = {**self.outcomes, **newer.outcomes}
        self.sent |= newer.sent
        self.deadlines.update(newer.deadlines)
        self.payloads.update(newer.payloads)


def settlements(
    reports: Reports,
    in_flight: Mapping[int, Job],
    requests: Mapping[int, OperatorRequest],
    matched: Mapping[int, tuple[int, Outcome]],
    retry: RetryStrategies,
    now: datetime,
    stored_retry: Mapping[int, dict[str, Any]] | None = None,
) -> list[Settlement]:
    """The in-flight jobs that reach an outcome this tick, settled by their strategy
    (``stored_retry``: retry settings changed since the job was loaded, by id)."""
    outcomes: dict[int, Outcome] = {}
    for (job_id, attempt), outcome in reports.outcomes.items():
        job = in_flight.get(job_id)
        if job is not None and job.attempt == attempt:  # else: stale, already settled
            outcomes[job_id] = outcome
    # A correlated response wins over what the transport said of the send.
    for job_id, (_response_id, outcome) in matched.items():
        outcomes[job_id] = outcome
    # An operator's request wins over what the attempt reported.
    for job_id, request in requests.items():
        if job_id in in_flight:
            outcomes[job_id] = request.outcome(now)
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
        if stored_retry and job_id in stored_retry:
            job = job._replace(retry=stored_retry[job_id])
        out.append(settle(job, outcome, _strategy(retry, job), now))
    return out


def _strategy(retry: RetryStrategies, job: Job) -> Any:
    try:
        return retry.get(job.retry)
    except Exception:  # a config that no longer loads: fall back to the default
        log.exception("job %s: retry config %r does not load", job.id, job.retry)
        return retry.get({"strategy": "exponential"})


async def write_reports(
    batch: QueueBatch,
    reports: Reports,
    in_flight: Mapping[int, Job],
    requests: Mapping[int, OperatorRequest],
    matched: Mapping[int, tuple[int, Outcome]],
    retry: RetryStrategies,
    now: datetime,
) -> tuple[list[Settlement], list[tuple[int, int]]]:
    """Persist this tick's settlements, sends, heartbeats and checkpoints; returns the
    settlements and the (response id, job id) pairs of the responses they used."""
    settled = settlements(reports, in_flight, requests, matched, retry, now)
    # A job about to be retried may have lost its job_key to a new job meanwhile (its
    # stored retry settings then forbid a retry): settled again with what is stored.
    retried = [
        s.job_id
        for s in settled
        if s.state == State.SCHEDULED and s.attempt_spent and s.job_id not in requests
    ]
    stored = await retry_settings(batch, retried)
    changed = {i: r for i, r in stored.items() if r != in_flight[i].retry}
    if changed:
        settled = settlements(reports, in_flight, requests, matched, retry, now, changed)
    await batch.job_settle(settled, now)
    await attempts_give_back(batch, settled)
    await requests_finish(batch, requests, settled, {i: j.retry for i, j in in_flight.items()}, now)
    done = {s.job_id for s in settled}
    used = [(r, j) for j, (r, _o) in matched.items() if j in done]
    await batch.response_mark(used, [], now)
    sent = [
        (i, a)
        for i, a in reports.sent
        if i not in done and (j := in_flight.get(i)) is not None and j.attempt == a
    ]
    await batch.job_mark_awaiting(sent, now)
    await batch.job_extend_deadlines(_live(reports.deadlines, in_flight, done))
    await batch.job_set_payloads(_live(reports.payloads, in_flight, done))
    return settled, used


def _live(items: dict[int, Any], in_flight: Mapping[int, Job], done: set[int]) -> dict[int, Any]:
    return {i: v for i, v in items.items() if i in in_flight and i not in done}


def apply_reports(
    in_flight: dict[int, Job], reports: Reports, settled: list[Settlement], claimed: list[Job]
) -> tuple[int, list[Job]]:
    """The tick committed: bring ``in_flight`` in line with it. Returns how many
    requests were sent and the jobs that left the in-flight view."""
    # Requests sent, counted before settling: a response can settle its job in
    # the very tick that learns of the send.
    sent = sum(
        1
        for job_id, attempt in reports.sent
        if (job := in_flight.get(job_id)) is not None and job.attempt == attempt
    )
    ended = [job for s in settled if (job := in_flight.pop(s.job_id, None)) is not None]
    for job_id, attempt in reports.sent:
        job = in_flight.get(job_id)
        if job is not None and job.attempt == attempt and job.state == State.RUNNING:
            in_flight[job_id] = job._replace(state=State.AWAITING)
    for job_id, deadline in reports.deadlines.items():
        if job_id in in_flight:
            in_flight[job_id] = in_flight[job_id]._replace(deadline=deadline)
    for job_id, payload in reports.payloads.items():
        if job_id in in_flight:
            in_flight[job_id] = in_flight[job_id]._replace(payload=payload)
    for job in claimed:
        in_flight[job.id] = job
    return sent, ended
