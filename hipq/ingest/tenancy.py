"""What a token's jobs may be: the names they give (type, queue, notification
targets), checked before intake resolves them so that a name the tenant may not use and
one that does not exist answer alike (a 422 for an unknown name would let it list
another tenant's); and, for each job as resolved, its queues, job types and what its
``JobLimits`` let it set.

Decided here, in pure code, for each job as intake resolved it (the type's defaults
applied): ``hipq.ingest.job_intake.Intake.resolve`` refuses it (the API's 403 naming
the field).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hipq.config import JobTypeConfig
from hipq.durations import format_duration
from hipq.job_types import JobTypes
from hipq.jobs import NewJob
from hipq.retry import retry_bounds
from hipq.security.tokens import JobLimits, Principal


def allowed_queues(principal: Principal, types: JobTypes) -> frozenset[str] | None:
    """The queues a token may submit to: those of its ``queue=``; for a token restricted
    by ``type=`` only, its job types' own queues (it may not spend another queue's
    capacity); None: any."""
    if principal.queues is not None:
        return principal.queues
    if principal.types is not None:
        return frozenset(types[t].config.queue for t in principal.types if t in types)
    return None


def name_refusal(
    principal: Principal, fields: Mapping[str, Any], types: JobTypes
) -> tuple[str, str] | None:
    """(field, why) when a restricted token's job names a type, queue or notification
    target the token may not use, whether or not it exists; None otherwise (and for an
    unrestricted token, whose unknown names intake answers 422)."""
    if not principal.restricted:
        return None
    name = fields.get("type")
    info = types.lookup(name)
    queues = allowed_queues(principal, types)
    own_queue = info is not None and (queues is None or info.config.queue in queues)
    if info is None or (principal.types is not None and name not in principal.types):
        return "type", f"may not submit jobs of type {name!r}"
    queue = fields.get("queue")
    if queue is None and not own_queue:
        # Its type's queue is another tenant's: said as for a type it may not use.
        return "type", f"may not submit jobs of type {name!r}"
    if queue is not None and queues is not None and queue not in queues:
        return "queue", f"may not submit to queue {queue!r}"
    return _target_refusal(principal.job_limits, fields.get("notify"), info.config.notify)


def targets_refusal(principal: Principal, notify: Sequence[str] | None) -> tuple[str, str] | None:
    """(field, why) when a restricted token names a notification target it may not use
    where no job type brings its own (a batch's ``notify``); None if it may."""
    if not principal.restricted:
        return None
    return _target_refusal(principal.job_limits, notify, ())


def _target_refusal(
    limits: JobLimits, notify: Sequence[str] | None, type_targets: Sequence[str]
) -> tuple[str, str] | None:
    if notify is None or limits.notify is None:
        return None
    for name in notify:
        if name not in type_targets and name not in limits.notify:
            return "notify", f"may not notify target {name!r}"
    return None


def caller_refusal(caller: Principal, job: NewJob, jt: JobTypeConfig) -> tuple[str, str] | None:
    """(field, why) when ``caller`` may not add ``job`` (of type ``jt``); None if it may."""
    if caller.queues is not None and job.queue not in caller.queues:
        return "queue", f"may not submit to queue {job.queue!r}"
    if caller.types is not None and job.type not in caller.types:
        return "type", f"may not submit jobs of type {job.type!r}"
    return job_refusal(caller.job_limits, job, jt)


def job_refusal(limits: JobLimits, job: NewJob, jt: JobTypeConfig) -> tuple[str, str] | None:
    """(field, why) when ``job`` sets what ``limits`` do not allow; None if it may."""
    return (
        _notify(limits, job, jt.notify)
        or _labels(limits, job)
        or _priority(limits, job, jt.priority)
        or _critical(limits, job)
        or _capacity(limits, job, jt)
        or _retry(limits, job, jt)
    )


def _most(limits: JobLimits, name: str, own: float | None, of_type: float | None) -> float | None:
    """The bound of ``name``: the line's, else the type's value if bounded by it."""
    if own is not None:
        return own
    return of_type if name in limits.type_bounds else None


def _capacity(limits: JobLimits, job: NewJob, jt: JobTypeConfig) -> tuple[str, str] | None:
    # A weight or a timeout beyond its type's holds a shared queue's capacity.
    weight = _most(limits, "weight", limits.weight_max, jt.weight)
    if weight is not None and job.weight > weight:
        return "weight", f"must be at most {weight:g}"
    timeout = _most(limits, "timeout", limits.timeout_max, jt.timeout)
    if timeout is not None and job.timeout_seconds > timeout:
        return "timeout", f"must be at most {format_duration(timeout)}"
    return None


def _retry(limits: JobLimits, job: NewJob, jt: JobTypeConfig) -> tuple[str, str] | None:
    # Attempts and their pace are what another system receives from one job.
    of_type = retry_bounds(jt.retry)
    if (
        of_type is None
        and job.retry != jt.retry
        and {"attempts", "retry_delay"} & limits.type_bounds
    ):
        return "retry", "may not change its job type's retry strategy"
    attempts = _most(limits, "attempts", limits.attempts_max, of_type[0] if of_type else None)
    delay = _most(limits, "retry_delay", limits.retry_delay_min, of_type[1] if of_type else None)
    if attempts is None and delay is None:
        return None
    asked = retry_bounds(job.retry)
    if asked is None:  # a plugin's strategy: its attempts and delays are its own
        return "retry.strategy", "may not choose a retry strategy whose delays hipq cannot bound"
    if attempts is not None and asked[0] > attempts:
        return "retry.max_attempts", f"must be at most {attempts:g}"
    if delay is not None and asked[0] > 1 and asked[1] < delay:
        return "retry", f"may not retry sooner than {format_duration(delay)} after a failure"
    return None


def _notify(limits: JobLimits, job: NewJob, type_targets: Sequence[str]) -> tuple[str, str] | None:
    chosen = set(job.notify or ())
    if limits.keep_type_targets and (dropped := sorted(set(type_targets) - chosen)):
        # Silencing the type's own targets would hide the outcome from their owner.
        return "notify", f"may not leave out the job type's notification target {dropped[0]!r}"
    if limits.notify is not None:
        extra = sorted(chosen - set(type_targets) - limits.notify)
        if extra:
            # hipq signs what it sends: a target is trusted to receive only its own jobs.
            return "notify", f"may not notify target {extra[0]!r}"
    return None


def _labels(limits: JobLimits, job: NewJob) -> tuple[str, str] | None:
    if limits.labels is None:
        return None
    for name, value in sorted(job.labels.items()):
        if name not in limits.labels:
            # Throttlers share capacity by label: another tenant's label takes its share.
            return f"labels.{name}", f"may not set label {name!r}"
        values = limits.labels[name]
        if values is not None and value not in values:
            return f"labels.{name}", f"may not set label {name!r} to {value!r}"
    return None


def _priority(limits: JobLimits, job: NewJob, type_priority: int) -> tuple[str, str] | None:
    low = type_priority if limits.type_priority_floor else limits.priority_min
    if low is not None and job.priority < low:
        return "priority", f"must be at least {low} (lower runs sooner)"
    if limits.priority_max is not None and job.priority > limits.priority_max:
        return "priority", f"must be at most {limits.priority_max}"
    return None


def _critical(limits: JobLimits, job: NewJob) -> tuple[str, str] | None:
    if job.critical and not limits.critical:
        return (
            "critical",
            "may not submit critical jobs (they pass let_critical_through throttlers)",
        )
    return None
