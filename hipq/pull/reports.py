"""A pull worker's report as it travels the inbox, and the outcome it settles.

A worker completes, fails or snoozes a job through ``/v1/workers/jobs/{id}/...``;
the route stores the report as a response under the job's per-attempt correlation
key (``source`` ``worker``), whose body says which it was. The owner's tick matches
it as any response (``hipq.batch_loop.correlation``) and reads the outcome here: a
failure keeps the worker's traceback and may be final, a snooze gives the attempt
back, as a python handler's do.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hipq.outcomes import Failed, Outcome, Snoozed, Succeeded
from hipq.retry import AttemptError
from hipq.store import NewResponse, Response
from hipq.store.pull_claims import WORKER_SOURCE

__all__ = ["WORKER_SOURCE", "completed", "failed", "snoozed", "worker_outcome"]


def completed(key: str, job_type: str, result: Any) -> NewResponse:
    return _report(key, job_type, True, {"outcome": "completed", "result": result})


def failed(
    key: str, job_type: str, error: str, retryable: bool, traceback: str | None
) -> NewResponse:
    body = {"outcome": "failed", "error": error, "retryable": retryable, "traceback": traceback}
    return _report(key, job_type, False, body, reason=error)


def snoozed(key: str, job_type: str, seconds: float, reason: str | None) -> NewResponse:
    body = {"outcome": "snoozed", "seconds": seconds, "reason": reason}
    return _report(key, job_type, False, body, reason=reason or f"snoozed for {seconds:g}s")


def _report(
    key: str, job_type: str, succeeded: bool, body: dict[str, Any], reason: str | None = None
) -> NewResponse:
    # Imported here: ``hipq.ingest`` imports the store, which a worker's outcome must not.
    from hipq.ingest.response_intake import fingerprint

    return NewResponse(
        correlation_key=key,
        source=WORKER_SOURCE,
        succeeded=succeeded,
        reason=reason,
        body=body,
        job_type=job_type,
        fingerprint=fingerprint(body),
    )


def worker_outcome(response: Response) -> Outcome | None:
    """The outcome a worker's report settles; None for a response that is no
    worker's report (the caller judges it as any response)."""
    body = response.body
    if response.source != WORKER_SOURCE or not isinstance(body, dict):
        return None
    kind = body.get("outcome")
    if kind == "completed":
        return Succeeded(body.get("result"))
    if kind == "snoozed":
        at = response.received_at + timedelta(seconds=float(body.get("seconds") or 0))
        return Snoozed(at, body.get("reason"))
    if kind == "failed":
        # As a python handler's exception: a plain error, final when not retryable.
        error = AttemptError(str(body.get("error")), retryable=bool(body.get("retryable", True)))
        return Failed(error, traceback=body.get("traceback"))
    return None
