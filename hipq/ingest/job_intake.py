"""Turning a job as a client posts it into a ``NewJob`` with every default resolved,
and a client's change to a scheduled job into the columns it changes.

The job type supplies the queue, priority, weight, timeout, retry and correlation
key template; the job may override each. Windows move ``run_at`` to the first
opening. Errors name the field, as the API reports them.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from hipq.config import Settings
from hipq.durations import parse_duration
from hipq.ingest.response_intake import callback_key_problem, route_key_problem
from hipq.ingest.tenancy import caller_refusal
from hipq.job_keys import JOB_KEY_MODES
from hipq.job_types import PULL_KEY_PREFIX, JobTypeInfo, JobTypes
from hipq.jobs import Job, NewJob
from hipq.plugins import PluginError, RetryStrategies
from hipq.security.tokens import Principal
from hipq.storable_text import NUL_MESSAGE, nul_field
from hipq.templates import TemplateError, new_job_context
from hipq.windows import Window, WindowError, next_opening, parse_windows

MAX_RUN_IN_SECONDS = 3650 * 86400
# Longer is a client bug, and the deadline (claimed_at + timeout) must stay a valid date.
MAX_TIMEOUT_SECONDS = 3650 * 86400.0


def timeout_problem(seconds: float) -> str | None:
    """Why a job cannot have this timeout; None if it can (every way in asks here)."""
    if seconds <= 0:
        return "must be greater than zero"
    if seconds > MAX_TIMEOUT_SECONDS:
        return "must be at most 3650d"
    return None


def capacity_problem(weight: int, queue: str, capacity: int | None) -> str | None:
    """Why a job of ``weight`` can never run in ``queue`` (None: it fits; a queue
    without a capacity takes any weight)."""
    if capacity is not None and weight > capacity:
        return f"{weight} exceeds the capacity {capacity} of queue {queue}"
    return None


class IntakeError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message

    @classmethod
    def of_windows(cls, exc: WindowError) -> IntakeError:
        """Name the window field at fault: its message starts with e.g. ``windows[1].tz: ``."""
        where, sep, message = str(exc).partition(": ")
        if sep and where.startswith("windows") and " " not in where:
            return cls(where, message)
        return cls("windows", str(exc))

    def within(self, prefix: str) -> IntakeError:
        """The same refusal, its field named within a list (``jobs[3].``)."""
        return type(self)(prefix + self.field, self.message)


class CallerRefused(IntakeError):
    """A job its caller may not add (outside its token's queues, types or job limits):
    the API's 403 naming the field."""


# Whether an unknown job type's error lists the configured ones: the API sets it per
# request (only a caller with the read scope sees the list).
LIST_JOB_TYPES: ContextVar[bool] = ContextVar("list_job_types", default=True)


class Intake:
    def __init__(self, settings: Settings, types: JobTypes, retry: RetryStrategies) -> None:
        self.settings, self.types, self.retry = settings, types, retry

    def job_type(self, name: Any) -> JobTypeInfo:
        info = self.types.lookup(name)
        if info is None:
            if not LIST_JOB_TYPES.get():
                raise IntakeError("type", f"unknown job type {name!r}")
            known = ", ".join(sorted(self.types)) or "none configured"
            raise IntakeError("type", f"unknown job type {name!r} (known: {known})")
        return info

    @staticmethod
    def timeout_seconds(raw: Any) -> float:
        try:
            timeout = parse_duration(raw)
        except ValueError as exc:
            raise IntakeError("timeout", str(exc)) from None
        if problem := timeout_problem(timeout):
            raise IntakeError("timeout", problem)
        return timeout

    @staticmethod
    def unique_for_seconds(raw: Any, job_key: str | None) -> float | None:
        """The period in which a second job with ``job_key`` returns the first."""
        if raw is None:
            return None
        if job_key is None:
            raise IntakeError("unique_for", "needs a job_key: the key is what is unique")
        try:
            seconds = parse_duration(raw)
        except ValueError as exc:
            raise IntakeError("unique_for", str(exc)) from None
        if not 0 < seconds <= MAX_RUN_IN_SECONDS:
            raise IntakeError("unique_for", "must be greater than zero and at most 3650d")
        return seconds

    @staticmethod
    def parse_windows(raw: Any) -> tuple[Window, ...]:
        try:
            return parse_windows(raw)
        except WindowError as exc:
            raise IntakeError.of_windows(exc) from None

    def _windowed(self, raw: Any, run_at: datetime) -> tuple[list[dict[str, Any]], datetime]:
        """The windows as stored, and ``run_at`` moved to their first opening."""
        parsed = self.parse_windows(raw)
        return [w.to_dict() for w in parsed], next_opening(parsed, run_at)

    def check_weight(self, queue: str, weight: int) -> None:
        capacity = (
            self.settings.queues[queue].concurrency if queue in self.settings.queues else None
        )
        if problem := capacity_problem(weight, queue, capacity):
            raise IntakeError("weight", problem)

    @staticmethod
    def run_at(run_at: datetime | None, run_in: Any, now: datetime) -> datetime:
        """The instant of ``run_at``, or ``run_in`` (a duration) from ``now``, or now."""
        if run_in is None:
            return run_at or now
        if run_at is not None:
            raise IntakeError("run_in", "give run_at or run_in, not both")
        try:
            seconds = parse_duration(run_in)
        except ValueError as exc:
            raise IntakeError("run_in", str(exc)) from None
        if not 0 <= seconds <= MAX_RUN_IN_SECONDS:
            raise IntakeError("run_in", "must be between 0 and 3650d")
        return now + timedelta(seconds=seconds)

    def resolve(
        self, job: dict[str, Any], now: datetime, caller: Principal | None = None
    ) -> NewJob:
        """``job`` holds the API fields that the client set (validated for shape).

        ``caller``: who adds it (None: the service itself). Its job is its tenant's
        (``NewJob.tenant``) and must be one its token allows (``CallerRefused``)."""
        for name, value in job.items():
            where = nul_field(value, name)
            if where:
                raise IntakeError(where, NUL_MESSAGE)
        info = self.job_type(job["type"])
        jt = info.config
        queue = job.get("queue") or jt.queue
        if queue not in self.settings.queues:
            raise IntakeError("queue", f"unknown queue {queue!r}")
        run_at = self.run_at(job.get("run_at"), job.get("run_in"), now)
        if caller is not None and not caller.job_limits.past_run_at:
            run_at = max(run_at, now)  # not before the jobs others added earlier
        windows = job.get("windows") or None
        if windows:
            windows, run_at = self._windowed(windows, run_at)
        timeout = self.timeout_seconds(
            job["timeout"] if job.get("timeout") is not None else jt.timeout
        )
        retry = jt.retry
        if job.get("retry"):
            retry = {**jt.retry, **job["retry"]} if "strategy" not in job["retry"] else job["retry"]
            try:
                self.retry.validate(retry)
            except PluginError as exc:
                raise IntakeError("retry", str(exc)) from None
        payload = job.get("payload") or {}
        labels = {**jt.labels, **(job.get("labels") or {})}  # the job's own values win
        correlation_key = job.get("correlation_key")
        template = info.correlation
        if correlation_key is not None and template is not None and info.key_at_dispatch:
            raise IntakeError(
                "correlation_key",
                f"job type {info.name} builds its key per attempt ({template.text})",
            )
        if correlation_key is None and template is not None and not info.key_at_dispatch:
            context = new_job_context(info.name, payload, labels)
            try:
                correlation_key = template.render(context)
            except TemplateError as exc:
                raise IntakeError("payload", f"correlation key: {exc}") from None
        if correlation_key is not None and correlation_key.startswith(PULL_KEY_PREFIX):
            # Pull workers' keys are hipq's own: a job holding one could take a claim's.
            raise IntakeError(
                "correlation_key", f"keys beginning with {PULL_KEY_PREFIX!r} are hipq's own"
            )
        if correlation_key is not None and (problem := callback_key_problem(correlation_key)):
            # Rendered from the payload, the key may hold what its callback URL cannot.
            raise IntakeError("correlation_key", problem)
        job_key = job.get("job_key")
        if job_key is not None and (problem := route_key_problem(job_key, "job_key")):
            raise IntakeError("job_key", problem)  # the by-key routes could not reach it
        mode = job.get("job_key_mode") or "replace"
        if mode not in JOB_KEY_MODES:
            raise IntakeError("job_key_mode", f"must be one of {', '.join(JOB_KEY_MODES)}")
        unique_for = self.unique_for_seconds(job.get("unique_for"), job_key)
        weight = job["weight"] if job.get("weight") is not None else jt.weight
        self.check_weight(queue, weight)
        new = NewJob(
            type=info.name,
            queue=queue,
            payload=payload,
            run_at=run_at,
            priority=job["priority"] if job.get("priority") is not None else jt.priority,
            weight=weight,
            labels=labels,
            windows=windows,
            timeout_seconds=timeout,
            retry=retry,
            critical=bool(job.get("critical", False)),
            correlation_key=correlation_key,
            job_key=job_key,
            job_key_mode=mode,
            unique_for_seconds=unique_for,
            flags=sorted(set(job["flags"])) if job.get("flags") else None,
            notify=self.notify_targets(job.get("notify"), jt.notify),
            after=list(dict.fromkeys(job["after"])) if job.get("after") else None,
            after_failed=(job.get("after_failed") or "cancel") if job.get("after") else None,
            batch_id=job.get("batch_id"),
        )
        if caller is None or not caller.authenticated:
            return new
        if refused := caller_refusal(caller, new, jt):
            field, why = refused
            raise CallerRefused(field, f"token {caller.name!r} {why}")
        return replace(new, tenant=caller.tenant) if caller.tenant else new

    def notify_targets(self, asked: list[str] | None, default: list[str]) -> list[str] | None:
        """The targets of a job's outcome notifications: its own, else its type's;
        None when there are none (no outbox row is written)."""
        names = default if asked is None else asked
        known = self.settings.notifications.targets
        for i, name in enumerate(names):
            if name not in known:
                listed = ", ".join(sorted(known)) or "none configured"
                raise IntakeError(
                    f"notify[{i}]", f"unknown notification target {name!r} ({listed})"
                )
        return sorted(set(names)) or None

    def check_changes(self, changes: dict[str, Any]) -> dict[str, Any]:
        """The parts of a change that need no job: ``changes`` holds the API fields set.

        Only ``windows`` may be null (it clears them); ``timeout`` becomes
        ``timeout_seconds``. The rest waits for the job: :meth:`resolve_changes`.
        """
        null = next((k for k, v in changes.items() if v is None and k != "windows"), None)
        if null is not None:
            raise IntakeError(null, "cannot be null")
        for name, value in changes.items():
            if where := nul_field(value, name):
                raise IntakeError(where, NUL_MESSAGE)
        checked = dict(changes)
        if "timeout" in checked:
            checked["timeout_seconds"] = self.timeout_seconds(checked.pop("timeout"))
        return checked

    def resolve_changes(self, job: Job, changes: dict[str, Any]) -> dict[str, Any]:
        """A checked change as applied to ``job``: windows move ``run_at`` to their first
        opening (from the new ``run_at`` or the job's), a weight must fit its queue."""
        resolved = dict(changes)
        if resolved.get("windows"):
            run_at = resolved.get("run_at") or job.run_at
            resolved["windows"], resolved["run_at"] = self._windowed(resolved["windows"], run_at)
        if "weight" in resolved:
            self.check_weight(job.queue, resolved["weight"])
        return resolved
