"""Operators' requests for jobs in flight, applied by the queue's loop at its next tick.

An operator may cancel, complete (with a result), fail (with a reason) or reschedule
any open job. A scheduled or finished job is changed by the API at once; a job in
flight (``running``/``awaiting``) belongs to its queue's loop, the only writer of such
jobs, so the API stores the request on the job (``cancel_requested`` set, the request
in ``operator_request``) and wakes the loop, which settles the job with the outcome
the request stands for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hipq.outcomes import Cancelled, FailedByOperator, Outcome, Rescheduled, Succeeded
from hipq.plugins import PluginError, RetryStrategies

VERBS = ("cancel", "complete", "fail", "reschedule")


@dataclass(frozen=True, slots=True)
class Reschedule:
    """What a reschedule changes besides the state (None: unchanged)."""

    run_at: datetime | None = None
    priority: int | None = None
    reset_attempts: bool = False
    max_attempts: int | None = None

    def columns(self, job_retry: dict[str, Any], *, strict: bool = True) -> dict[str, Any]:
        """The job's columns this reschedule sets (run_at aside).

        A changed retry is validated as a new job's is (``none`` takes no max_attempts
        but 1): refused with ``RetryRefused`` when ``strict``, else the job keeps its
        retry (a bulk reschedule over jobs of several strategies)."""
        out: dict[str, Any] = {}
        if self.priority is not None:
            out["priority"] = self.priority
        if self.reset_attempts:
            out["attempt"] = 0
        if self.max_attempts is not None:
            retry = {**job_retry, "max_attempts": self.max_attempts}
            try:
                _RETRIES.validate(retry)
            except PluginError as exc:
                if strict:
                    strategy = job_retry.get("strategy", "exponential")
                    raise RetryRefused(
                        f"the job's retry strategy {strategy!r} refuses it ({exc})"
                    ) from None
                retry = job_retry  # the same columns for every job of a bulk step
            out["retry"] = retry
        return out


class RetryRefused(ValueError):
    """A reschedule's max_attempts that the job's retry strategy does not take."""

    field = "max_attempts"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# The validation of a job's retry at intake, shared (strategies are plugins).
_RETRIES = RetryStrategies()


@dataclass(frozen=True, slots=True)
class OperatorRequest:
    verb: str  # one of VERBS
    result: Any = None  # complete
    reason: str | None = None  # cancel, fail
    reschedule: Reschedule | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verb": self.verb}
        if self.verb == "complete":
            out["result"] = self.result
        if self.reason is not None:
            out["reason"] = self.reason
        if (r := self.reschedule) is not None:
            out.update(
                run_at=r.run_at.isoformat() if r.run_at else None,
                priority=r.priority,
                reset_attempts=r.reset_attempts,
                max_attempts=r.max_attempts,
            )
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> OperatorRequest:
        """The stored request; NULL is a cancel (the only request before revision 0008)."""
        if not data:
            return cls("cancel")
        reschedule = None
        if data["verb"] == "reschedule":
            run_at = data.get("run_at")
            reschedule = Reschedule(
                run_at=datetime.fromisoformat(run_at) if run_at else None,
                priority=data.get("priority"),
                reset_attempts=bool(data.get("reset_attempts")),
                max_attempts=data.get("max_attempts"),
            )
        return cls(data["verb"], data.get("result"), data.get("reason"), reschedule)

    def outcome(self, now: datetime) -> Outcome:
        """The outcome the loop settles the in-flight job with."""
        if self.verb == "complete":
            return Succeeded(self.result)
        if self.verb == "fail":
            return FailedByOperator(self.reason or "failed by an operator")
        if self.verb == "reschedule":
            at = self.reschedule.run_at if self.reschedule else None
            return Rescheduled(at or now)
        return Cancelled(self.reason) if self.reason else Cancelled()


def key_taken_over(retry: dict[str, Any]) -> dict[str, Any]:
    """The retry settings of a job in flight whose job_key a new job took: this attempt
    is its last (graphile-worker: the replaced job is not retried)."""
    return {"strategy": "none"}
