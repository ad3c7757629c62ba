"""Turning an attempt's outcome into one persisted change of its job (a pure function).

The retry strategy receives a defensive copy of the job, so nothing it does can
touch the loop's view; what it decides is persisted before the job is forgotten.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson

from hipq.jobs import Attempt, Job
from hipq.lifecycle import IN_FLIGHT, InvalidTransition, State, check_transition
from hipq.retry import AttemptError, GiveUp, RetryAt, RetryStrategy

log = logging.getLogger("hipq.outcomes")

# When a retry strategy itself raises, the job is retried after this delay rather
# than dead-lettered by a bug in a plugin.
STRATEGY_FAULT_DELAY = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class Settlement:
    """The persisted form of one attempt's outcome (made by ``settle``)."""

    job_id: int
    attempt: int  # the attempt it settles: a guard against settling a newer one
    state: State
    run_at: datetime
    payload: dict[str, Any]
    finished_at: datetime | None
    result: Any
    last_error: str | None
    record: Attempt | None
    # False: the job asked to wait (a snooze); its attempt is given back, not spent.
    attempt_spent: bool = True
    type: str = ""  # the job's type, for observers of the settlement
    # What the settlement means to an operator: completed | retried | failed (not
    # retryable) | given_up (the strategy stopped) | cancelled; and the failed
    # attempt's error kind (``AttemptError.kind``: timeout, http_status, ...).
    verdict: str = ""
    error_kind: str | None = None

    def event_fields(self) -> dict[str, Any]:
        """The ``job_settled`` event's fields (no payload, result or response)."""
        return {
            "job_id": self.job_id,
            "type": self.type,
            "state": self.state.value,
            "attempt": self.attempt,
            "verdict": self.verdict,
            "error": self.last_error,
            "error_kind": self.error_kind,
            "run_at": self.run_at if self.state == State.SCHEDULED else None,
            "traceback": self.record.traceback if self.record else None,
        }


@dataclass(frozen=True, slots=True)
class Succeeded:
    result: Any = None


@dataclass(frozen=True, slots=True)
class Failed:
    error: AttemptError
    response: Any = None  # what the peer answered, kept in the attempt's record
    traceback: str | None = None  # a python handler's, bounded; kept in the attempt's record


@dataclass(frozen=True, slots=True)
class Cancelled:
    reason: str = "cancelled by request"


@dataclass(frozen=True, slots=True)
class FailedByOperator:
    """An operator ended the job as failed: no retry strategy is asked."""

    reason: str


@dataclass(frozen=True, slots=True)
class Rescheduled:
    """An operator put the job back to wait until ``run_at`` (not an attempt's failure)."""

    run_at: datetime


@dataclass(frozen=True, slots=True)
class Snoozed:
    """The job asked to run again at ``run_at`` (a handler's snooze, or a peer's 429/503
    with Retry-After where the job type says so): no attempt is spent, no strategy asked."""

    run_at: datetime
    reason: str | None = None


Outcome = Succeeded | Failed | Cancelled | FailedByOperator | Rescheduled | Snoozed

# The state an outcome ends in, for the error of one that cannot be settled.
_ENDS_IN: dict[type, State] = {
    Succeeded: State.COMPLETED,
    Cancelled: State.CANCELLED,
    Rescheduled: State.SCHEDULED,
    Snoozed: State.SCHEDULED,
}


def settle(job: Job, outcome: Outcome, strategy: RetryStrategy, now: datetime) -> Settlement:
    """The one change that ``outcome`` makes to ``job`` (an in-flight job)."""
    if job.state not in IN_FLIGHT:
        # An attempt ends only for a job in flight: an operator ends a scheduled job
        # by the store's guarded updates, never through here.
        raise InvalidTransition(job.state, _ENDS_IN.get(type(outcome), State.FAILED))
    if isinstance(outcome, Succeeded):
        return _final(job, State.COMPLETED, now, "completed", result=outcome.result)
    if isinstance(outcome, Cancelled):
        return _final(job, State.CANCELLED, now, "cancelled", error=outcome.reason)
    if isinstance(outcome, FailedByOperator):
        return _final(job, State.FAILED, now, "failed", error=outcome.reason)
    if isinstance(outcome, Snoozed):
        check_transition(job.state, State.SCHEDULED)
        return Settlement(
            job_id=job.id,
            attempt=job.attempt,
            state=State.SCHEDULED,
            run_at=max(outcome.run_at, now),
            payload=job.payload,
            finished_at=None,
            result=None,
            last_error=outcome.reason or job.last_error,
            record=None,  # the attempt is given back: it is made again, and recorded then
            attempt_spent=False,
        )
    if isinstance(outcome, Rescheduled):
        check_transition(job.state, State.SCHEDULED)
        return Settlement(
            job_id=job.id,
            attempt=job.attempt,
            state=State.SCHEDULED,
            run_at=outcome.run_at,
            payload=job.payload,
            finished_at=None,
            result=None,
            last_error=job.last_error,
            record=_record(job, now, "rescheduled", None),
        )
    error = outcome.error
    kind = error.kind
    if not error.retryable:
        # PermanentError, a refused request...: no strategy may retry it, even a plugin
        # that ignores ``error.retryable``.
        return _final(
            job,
            State.FAILED,
            now,
            "failed",
            error=f"not retryable: {error.message}",
            response=outcome.response,
            verdict="failed",
            kind=kind,
            traceback=outcome.traceback,
        )
    try:
        decision = _checked(strategy.decide(job.defensive_copy(), error, now))
    except Exception as exc:
        log.exception("retry strategy failed for job %s; retrying it later", job.id)
        at = now + STRATEGY_FAULT_DELAY
        decision = RetryAt(max(at, error.retry_after) if error.retry_after else at, None)
        error = AttemptError(f"{error.message} (retry strategy failed: {exc})", error.kind)
    if isinstance(decision, GiveUp):
        return _final(
            job,
            State.FAILED,
            now,
            "failed",
            error=decision.reason,
            response=outcome.response,
            verdict="given_up",
            kind=kind,
            traceback=outcome.traceback,
        )
    check_transition(job.state, State.SCHEDULED)
    payload = decision.payload if decision.payload is not None else job.payload
    return Settlement(
        job_id=job.id,
        attempt=job.attempt,
        state=State.SCHEDULED,
        run_at=decision.at,
        payload=payload,
        finished_at=None,
        result=None,
        last_error=error.message,
        record=_record(job, now, "retried", error.message, outcome.response, outcome.traceback),
        type=job.type,
        verdict="retried",
        error_kind=kind,
    )


def _checked(decision: object) -> RetryAt | GiveUp:
    """Refuse what the store could not persist: it would fail the queue's whole tick."""
    if isinstance(decision, GiveUp):
        if not isinstance(decision.reason, str):
            raise TypeError("GiveUp.reason is not a string")
        return decision
    if not isinstance(decision, RetryAt):
        raise TypeError(f"returned {type(decision).__name__}, not RetryAt or GiveUp")
    if not isinstance(decision.at, datetime) or decision.at.tzinfo is None:
        raise TypeError("RetryAt.at is not an aware datetime")
    if decision.payload is not None:
        if not isinstance(decision.payload, dict):
            raise TypeError("RetryAt.payload is not a JSON object")
        orjson.dumps(decision.payload)  # the store's encoder: raises what it cannot keep
    return decision


def _final(
    job: Job,
    state: State,
    now: datetime,
    label: str,
    *,
    result: Any = None,
    error: str | None = None,
    response: Any = None,
    verdict: str | None = None,
    kind: str | None = None,
    traceback: str | None = None,
) -> Settlement:
    check_transition(job.state, state)
    return Settlement(
        job_id=job.id,
        attempt=job.attempt,
        state=state,
        run_at=job.run_at,
        payload=job.payload,
        finished_at=now,
        result=result,
        last_error=error,
        record=_record(job, now, label, error, result if response is None else response, traceback),
        type=job.type,
        verdict=verdict or label,
        error_kind=kind,
    )


def _record(
    job: Job,
    now: datetime,
    outcome: str,
    error: str | None,
    response: Any = None,
    traceback: str | None = None,
) -> Attempt:
    return Attempt(
        job_id=job.id,
        attempt=job.attempt,
        started_at=job.claimed_at,
        finished_at=now,
        outcome=outcome,
        error=error,
        response=response,
        traceback=traceback,
    )


def response_outcome(succeeded: bool, reason: str | None, body: Any) -> Outcome:
    """The outcome a correlated response (callback or Kafka message) reports."""
    if succeeded:
        return Succeeded(body)
    message = reason or "the response reports a failure"
    return Failed(AttemptError(message, kind="response"), response=body)
