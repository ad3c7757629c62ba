"""The rules of the SQL function ``hipq_insert_jobs`` in Python, for SQLite (which has no
SQL functions): a job as the application passes it to ``hipq.transactional``, checked
and resolved against the job types and queues hipq mirrored into the database
(``hipq.store.job_types_mirror``), into the row to insert. The same refusals, named by
field, as the function and the API; ``tests/transactional`` runs both engines through
one table of cases.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from hipq.durations import parse_duration
from hipq.ingest.job_intake import MAX_RUN_IN_SECONDS, capacity_problem, timeout_problem
from hipq.ingest.response_intake import callback_key_problem, route_key_problem
from hipq.job_keys import JOB_KEY_MODES
from hipq.job_types import PULL_KEY_PREFIX, PULL_KEY_REFUSED
from hipq.store.job_types_mirror import MirroredJobType, MirroredQueue
from hipq.store.schema import KEY_MAX_LENGTH
from hipq.templates import JOB_ROOTS, TemplateError, compile_template, new_job_context

__all__ = ["FIELDS", "EnqueueError", "Resolved", "mirror_from_rows", "resolve"]

# The fields of a job as hipq_add_jobs takes them (JSON); ``type`` is required.
FIELDS = (
    "type payload queue run_at priority weight labels timeout_seconds max_attempts critical "
    "correlation_key flags job_key job_key_mode unique_for"
).split()
_INT32 = 2147483647
# A job's flags, as the API takes them (hipq.api.models.FlagName).
MAX_FLAGS, MAX_FLAG_LENGTH = 20, 100
_FLAG_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1
_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(:\d\d(\.\d+)?)?([Zz]|[+-]\d\d(:?\d\d)?)$")
NAIVE = "needs a time zone (an aware datetime)"
# A duration as text: seconds, or parts with a unit (hipq.durations); the SQL functions
# parse the same form (alembic 0023, hipq_duration_seconds).
_DURATION = re.compile(r"\d+(\.\d+)?|(\d+(\.\d+)?(ms|s|m|h|d))+")
UNIQUE_FOR_FORM = "must be a number of seconds or a duration such as '1h' or '90s'"


class Resolved(NamedTuple):
    """A job ready to insert: its row, and how its ``job_key`` decides (hipq.job_keys)."""

    row: dict[str, Any]
    job_key_mode: str = "replace"
    unique_for_seconds: float | None = None


class EnqueueError(ValueError):
    """A job the database refused; ``field`` names it as the API does (``jobs[3].type``).

    ``conflict`` is true when an open job holds its correlation key (the API's 409).
    """

    def __init__(self, field: str, message: str, conflict: bool = False) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.conflict = field, message, conflict


def mirror_from_rows(
    type_rows: list[Sequence[Any]], queue_rows: list[Sequence[Any]]
) -> tuple[dict[str, MirroredJobType], dict[str, MirroredQueue]]:
    types = {}
    for row in type_rows:
        name, queue, priority, weight, timeout, retry, key, parts, at_dispatch, labels, notify = row
        types[name] = MirroredJobType(
            name=name,
            queue=queue,
            priority=priority,
            weight=weight,
            timeout_seconds=float(timeout),
            retry=_loaded(retry),
            correlation_key=key,
            key_parts=_loaded(parts),
            key_at_dispatch=bool(at_dispatch),
            labels=_loaded(labels) or {},
            notify=_loaded(notify),
        )
    return types, {name: MirroredQueue(name, capacity) for name, capacity in queue_rows}


def _loaded(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def field_name(index: int, many: bool, name: str) -> str:
    return f"jobs[{index}].{name}" if many else name


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def resolve(
    jobs: Sequence[Any],
    types: Mapping[str, MirroredJobType],
    queues: Mapping[str, MirroredQueue],
    now: datetime,
    many: bool = True,
) -> list[Resolved]:
    """Each job as the row ``hipq_insert_jobs`` would insert, or the same refusal."""
    if not jobs:
        raise EnqueueError("jobs", "must hold at least one job")
    return [_resolve_one(job, i, many, types, queues, now) for i, job in enumerate(jobs)]


def _resolve_one(
    job: Any,
    index: int,
    many: bool,
    types: Mapping[str, MirroredJobType],
    queues: Mapping[str, MirroredQueue],
    now: datetime,
) -> Resolved:
    def refuse(name: str, message: str) -> EnqueueError:
        return EnqueueError(field_name(index, many, name), message)

    if not isinstance(job, Mapping):
        raise EnqueueError(f"jobs[{index}]" if many else "job", "must be a JSON object")
    job = {k: v for k, v in job.items() if v is not None}
    extra = sorted(k for k in job if k not in FIELDS)
    if extra:
        raise refuse(extra[0], f"unknown field (known: {', '.join(FIELDS)})")
    name = job.get("type")
    if not isinstance(name, str):
        raise refuse("type", "must be the name of a job type")
    jt = types.get(name)
    if jt is None:
        known = ", ".join(sorted(types)) or "none: no hipq process has started on this database yet"
        raise refuse("type", f"unknown job type {name!r} (known: {known})")
    queue = job.get("queue", jt.queue)
    if not isinstance(queue, str):
        raise refuse("queue", "must be a string")
    if queue not in queues:
        raise refuse("queue", f"unknown queue {queue!r}")
    payload = job.get("payload", {})
    if not isinstance(payload, Mapping):
        raise refuse("payload", "must be a JSON object")
    labels = job.get("labels", {})
    if not isinstance(labels, Mapping):
        raise refuse("labels", "must be a JSON object of strings")
    bad_label = sorted(k for k, v in labels.items() if not isinstance(v, str))
    if bad_label:
        raise refuse(f"labels.{bad_label[0]}", "must be a string")
    labels = {**jt.labels, **labels}  # the job's own values win
    run_at = _run_at(job.get("run_at"), now, refuse)
    priority = job.get("priority", jt.priority)
    if not _is_int(priority) or abs(priority) > _INT32:
        raise refuse("priority", f"must be an integer between -{_INT32} and {_INT32}")
    weight = job.get("weight", jt.weight)
    if not _is_int(weight) or not 1 <= weight <= 1_000_000:
        raise refuse("weight", "must be an integer between 1 and 1000000")
    if problem := capacity_problem(int(weight), queue, queues[queue].concurrency):
        raise refuse("weight", problem)
    timeout = job.get("timeout_seconds", jt.timeout_seconds)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise refuse("timeout_seconds", "must be a number of seconds")
    if problem := timeout_problem(timeout):
        raise refuse("timeout_seconds", problem)
    retry = dict(jt.retry)
    if "max_attempts" in job:
        attempts = job["max_attempts"]
        if not _is_int(attempts) or not 1 <= attempts <= 10_000:
            raise refuse("max_attempts", "must be an integer between 1 and 10000")
        if retry.get("strategy") == "none" and attempts > 1:
            raise refuse("max_attempts", f"job type {name} never retries (retry strategy none)")
        retry["max_attempts"] = int(attempts)
    critical = job.get("critical", False)
    if not isinstance(critical, bool):
        raise refuse("critical", "must be true or false")
    key = _correlation_key(job, jt, payload, labels, refuse)
    flags = _flags(job.get("flags"), refuse)
    job_key, mode, unique_for = _job_key(job, refuse)
    row = {
        "queue": queue,
        "type": name,
        "state": "scheduled",
        "payload": dict(payload),
        "labels": dict(labels),
        "windows": None,
        "retry": retry,
        "run_at": run_at,
        "priority": int(priority),
        "weight": int(weight),
        "timeout_seconds": float(timeout),
        "critical": critical,
        "correlation_key": key,
        "job_key": job_key,
        "attempt": 0,
        "created_at": now,
        "updated_at": now,
        "cancel_requested": False,
        "flags": flags,
        "notify": jt.notify,
    }
    return Resolved(row, mode, unique_for)


def _job_key(job: Mapping[str, Any], refuse: Any) -> tuple[str | None, str, float | None]:
    """The job_key, its mode and its period of uniqueness (seconds), as the API checks them."""
    key = job.get("job_key")
    if key is not None:
        if not isinstance(key, str):
            raise refuse("job_key", "must be a string")
        if problem := route_key_problem(key, "job_key"):
            raise refuse("job_key", problem)
        if len(key) > KEY_MAX_LENGTH:
            raise refuse("job_key", f"must be at most {KEY_MAX_LENGTH} characters")
    mode = job.get("job_key_mode", "replace")
    if mode not in JOB_KEY_MODES:
        raise refuse("job_key_mode", f"must be one of {', '.join(JOB_KEY_MODES)}")
    raw = job.get("unique_for")
    if raw is None:
        return key, mode, None
    if key is None:
        raise refuse("unique_for", "needs a job_key: the key is what is unique")
    if isinstance(raw, timedelta):
        raw = raw.total_seconds()
    if isinstance(raw, str) and _DURATION.fullmatch(raw.replace(" ", "")):
        seconds = parse_duration(raw)
    elif isinstance(raw, int | float) and not isinstance(raw, bool):
        seconds = float(raw)
    else:
        raise refuse("unique_for", UNIQUE_FOR_FORM)
    if not 0 < seconds <= MAX_RUN_IN_SECONDS:
        raise refuse("unique_for", "must be greater than zero and at most 3650d")
    return key, mode, seconds


def _flags(value: Any, refuse: Any) -> list[str] | None:
    """Sorted, once each; None for none (as the API stores them)."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise refuse("flags", "must be a list of flag names")
    if len(value) > MAX_FLAGS:
        raise refuse("flags", f"must hold at most {MAX_FLAGS} flags")
    for i, flag in enumerate(value):
        if (
            not isinstance(flag, str)
            or not 1 <= len(flag) <= MAX_FLAG_LENGTH
            or _FLAG_CONTROL.search(flag)
        ):
            raise refuse(
                f"flags[{i}]",
                f"must be a flag name: 1 to {MAX_FLAG_LENGTH} characters, no control characters",
            )
    return sorted(set(value)) or None


def _run_at(value: Any, now: datetime, refuse: Any) -> datetime:
    if value is None:
        return now
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise refuse("run_at", NAIVE)
        return value.astimezone(UTC)
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise refuse(
            "run_at", "must be an RFC 3339 instant with an offset, e.g. 2026-01-05T12:00:00Z"
        )
    try:
        return datetime.fromisoformat(value.replace("z", "Z")).astimezone(UTC)
    except ValueError:
        raise refuse("run_at", "is not a valid instant") from None


def _correlation_key(
    job: Mapping[str, Any],
    jt: MirroredJobType,
    payload: Mapping[str, Any],
    labels: Mapping[str, str],
    refuse: Any,
) -> str | None:
    key = job.get("correlation_key")
    if key is not None:
        if not isinstance(key, str):
            raise refuse("correlation_key", "must be a string")
        if jt.key_at_dispatch:
            raise refuse(
                "correlation_key",
                f"job type {jt.name} builds its key per attempt ({jt.correlation_key})",
            )
    elif jt.correlation_key is not None and not jt.key_at_dispatch:
        template = compile_template(jt.correlation_key, JOB_ROOTS)
        try:
            key = template.render(new_job_context(jt.name, payload, labels))
        except TemplateError as exc:
            raise refuse("payload", f"correlation key: {exc}") from None
    if key is None:
        return None
    if key.startswith(PULL_KEY_PREFIX):  # pull workers' keys are hipq's own
        raise refuse("correlation_key", PULL_KEY_REFUSED)
    if problem := callback_key_problem(key):
        raise refuse("correlation_key", problem)
    if len(key) > KEY_MAX_LENGTH:
        raise refuse("correlation_key", f"must be at most {KEY_MAX_LENGTH} characters")
    return key


def key_in_use(index: int | None, many: bool) -> EnqueueError:
    return EnqueueError(
        "correlation_key" if index is None else field_name(index, many, "correlation_key"),
        "correlation_key is already used by an open job",
        conflict=True,
    )


def sqlite_conflict(exc: Exception, index: int, many: bool) -> EnqueueError | None:
    """A key taken by another writer between the check and the insert (the unique index)."""
    text = str(exc)
    if "UNIQUE constraint failed" in text and "correlation_key" in text:
        return key_in_use(index, many)
    return None


def sqlite_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A resolved row as hipq stores it on SQLite (``hipq.store.schema``): JSON as text,
    instants as fixed-width UTC text, booleans as 0/1."""
    out: dict[str, Any] = {}
    for name, value in row.items():
        if isinstance(value, datetime):
            out[name] = value.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")
        elif isinstance(value, dict | list):
            out[name] = json.dumps(value)
        elif isinstance(value, bool):
            out[name] = int(value)
        else:
            out[name] = value
    return out
