"""The REST API's request and response bodies (pydantic lives at the edges only)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from operator import attrgetter
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
)

from hipq.ingest.job_in import (
    _INT32,
    MAX_ID,
    Duration,
    FlagName,
    JobIn,
    Labels,
    RunAt,
    TargetName,
    WindowIn,
    _In,
)
from hipq.jobs import Attempt, Job
from hipq.storable_text import storable
from hipq.store.heartbeats import Heartbeat
from hipq.store.schema import KEY_MAX_LENGTH
from hipq.throttling import MAX_CAPACITY


def _ascii_digits(value: Any) -> Any:
    # int() would also take "1.0", " 1" (%201) and other scripts' digits: one object,
    # one spelling of its id.
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("must be a positive integer in ASCII digits")
    return value


# An id in a route's path is written in ASCII digits (with Path(ge=1, le=MAX_ID): one
# beyond BIGINT is a 422, not a database error).
ASCII_DIGITS = BeforeValidator(_ascii_digits)
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="the job's id"), ASCII_DIGITS]


class CompletionIn(_In):
    type: str = Field(min_length=1, max_length=200, description="a job type from the config")
    payload: dict[str, Any] = Field(
        default_factory=dict, description="its payload; the counts are added under 'batch'"
    )
    queue: str | None = Field(None, max_length=200, description="default: the job type's queue")


class BatchIn(_In):
    on_complete: CompletionIn | None = Field(
        None,
        description="a job that runs once every job of the batch finished (completed, "
        "failed or cancelled), with the counts in its payload under 'batch'",
    )
    notify: list[TargetName] | None = Field(
        None,
        max_length=20,
        description="notification targets told once when the batch finishes (type "
        "batch.finished, with its counts); with or without on_complete",
    )


class JobBatchIn(_In):
    jobs: list[JobIn] = Field(
        min_length=1, description="stored all or none; at most server.max_batch_jobs"
    )
    batch: BatchIn | None = Field(
        None, description="make the jobs a batch: its counts at GET /v1/batches/{id}"
    )


class JobPatch(_In):
    run_at: RunAt | None = Field(None, description="not before this instant (RFC 3339)")
    priority: StrictInt | None = Field(None, ge=-_INT32, le=_INT32, description="lower runs first")
    payload: dict[str, Any] | None = Field(None, description="replaces the payload")
    weight: StrictInt | None = Field(None, ge=1, le=1_000_000, description="capacity units")
    labels: Labels | None = Field(None, description="replaces the labels (bounded as on a new job)")
    windows: list[WindowIn] | None = Field(
        None, description="replaces the windows (null: none); moves run_at to their next opening"
    )
    timeout: Duration | None = Field(None, description="seconds, or a duration such as '24h'")


class RetryRequest(_In):
    run_at: RunAt | None = Field(None, description="run not before this instant; default now")


class CompleteRequest(_In):
    result: Annotated[Any, AfterValidator(storable)] = Field(
        None, description="the job's result, any JSON value"
    )


class FailRequest(_In):
    reason: Annotated[str, AfterValidator(storable)] = Field(
        min_length=1, max_length=2000, description="why, kept as last_error"
    )


class CancelRequest(_In):
    reason: Annotated[str | None, AfterValidator(storable)] = Field(
        None, min_length=1, max_length=2000, description="kept as last_error"
    )


class ForbiddenFlagsIn(_In):
    flags: list[FlagName] = Field(max_length=100, description="replaces the queue's set")


class LimitsIn(_In):
    """A change of a queue's limits; what is not given keeps its value."""

    concurrency: StrictInt | None = Field(
        None,
        ge=1,
        le=MAX_CAPACITY,
        description="the queue's capacity in units (at least 1); null: unlimited, only "
        "for a queue whose config sets no concurrency",
    )
    throttlers: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        max_length=100,
        description="by index in the queue's configured throttlers: the settings to change "
        "(share: shares, other; per_key: limit; rate: limit, per; concurrency: limit), e.g. "
        '{"0": {"shares": {"east": 50, "west": 50}}}',
    )


class RescheduleRequest(_In):
    run_at: RunAt | None = Field(None, description="run not before this instant; default now")
    run_in: Duration | None = Field(None, description="run not before this long from now")
    priority: StrictInt | None = Field(None, ge=-_INT32, le=_INT32, description="lower runs first")
    reset_attempts: StrictBool = Field(False, description="count attempts from 0 again")
    max_attempts: StrictInt | None = Field(
        None,
        ge=1,
        le=10_000,
        description="the job's retry max_attempts from now on, checked as a new job's retry "
        "is (422 if its strategy refuses it: none takes only 1)",
    )


class AttemptOut(BaseModel):
    attempt: int = Field(description="1 for the first attempt")
    started_at: datetime | None = Field(description="when it was sent (null if never sent)")
    finished_at: datetime = Field(description="when it ended")
    outcome: str = Field(description="completed, failed, retried, timeout, cancelled, ...")
    error: str | None = Field(None, description="why it did not complete")
    response: Any = Field(None, description="the external system's response that settled it")
    traceback: str | None = Field(
        None,
        description="the traceback of the exception a python handler raised: its innermost"
        " frames, at most the last 8 KiB (null for http and kafka jobs, whose error says why)",
    )


class HeartbeatOut(BaseModel):
    at: datetime = Field(description="when hipq received the last heartbeat")
    attempt: int = Field(description="the attempt it was for")
    deadline: datetime = Field(
        description="the deadline it asked for: its time plus the job type's heartbeat_timeout"
    )
    progress: Any = Field(description="the progress it reported (any JSON), or null")


class JobOut(BaseModel):
    id: int = Field(description="the job's id")
    type: str = Field(description="its job type")
    queue: str = Field(description="the queue it runs in")
    state: str = Field(description="scheduled, running, awaiting, completed, failed, cancelled")
    payload: dict[str, Any] = Field(description="the JSON object it was given")
    run_at: datetime = Field(description="not before this instant")
    priority: int = Field(description="lower runs first")
    weight: int = Field(description="capacity units it holds in flight")
    labels: dict[str, str] = Field(description="read by throttlers")
    windows: list[dict[str, Any]] | None = Field(description="time-of-day windows it may start in")
    timeout: float = Field(description="seconds")
    retry: dict[str, Any] = Field(description="its retry strategy, resolved")
    critical: bool = Field(description="passes throttlers that let critical work through")
    correlation_key: str | None = Field(description="the key its response carries")
    job_key: str | None = Field(description="at most one open job holds it")
    attempt: int = Field(description="attempts started so far")
    created_at: datetime = Field(description="when it was created")
    updated_at: datetime = Field(description="when it last changed")
    claimed_at: datetime | None = Field(description="when its current attempt started")
    deadline: datetime | None = Field(description="when its current attempt times out")
    finished_at: datetime | None = Field(description="when it reached a final state")
    result: Any = Field(description="its result, once completed")
    last_error: str | None = Field(description="the last failure, or an operator's reason")
    waiting_reason: str | None = Field(
        description="why a scheduled job has not started, whatever the cause: the jobs or "
        "batch it waits for, a closed window, a run_at to come, its queue paused, full or "
        "run by no process, the throttler or forbidden flag that held it, or not read yet "
        "(GET answers; null once it started)"
    )
    cancel_requested: bool = Field(description="an operator's verb waits for its queue's loop")
    flags: list[str] | None = Field(None, description="flags an operator may forbid on its queue")
    notify: list[str] | None = Field(
        None, description="the notification targets of its outcome (GET .../notifications)"
    )
    after: list[int] | None = Field(None, description="the ids of the jobs it runs after")
    after_failed: str | None = Field(
        None, description="what a failed job it runs after does to it: cancel or run"
    )
    waiting_for: int | None = Field(
        None,
        description="how many of the jobs it runs after have not finished yet (a batch's "
        "completion job: 1 until its batch finishes)",
    )
    batch_id: int | None = Field(None, description="the batch it belongs to")
    attempts: list[AttemptOut] | None = Field(
        None, description="its attempts (when one job is read; null in lists)"
    )
    heartbeat: HeartbeatOut | None = Field(
        None,
        description="the last heartbeat of an external job (POST /v1/callbacks/{key}/heartbeat)"
        " and its progress; shown by GET /v1/jobs/{id}",
    )

    @classmethod
    def of(
        cls, job: Job, attempts: list[Attempt] | None = None, heartbeat: Heartbeat | None = None
    ) -> JobOut:
        return cls.model_validate(job_body(job, attempts, heartbeat))


def _body_of(
    fields: Iterable[str],
    read_from: Mapping[str, str] | None = None,
    shown_as: Mapping[str, Callable[[Any], Any]] | None = None,
) -> Callable[[Any], dict[str, Any]]:
    """A record's answer body: each of ``fields`` (a model's, in its order) the record's
    attribute of that name, or of the one ``read_from`` names, turned by ``shown_as``
    where it says. A field the model gains is then in every answer, or its read fails
    at once. One ``attrgetter`` reads them all: as fast as the dict written out."""
    names = tuple(fields)
    read = attrgetter(*(dict(read_from or {}).get(n, n) for n in names))
    shown = tuple((shown_as or {}).items())

    def body(record: Any) -> dict[str, Any]:
        out = dict(zip(names, read(record), strict=True))
        for name, show in shown:
            out[name] = show(out[name])
        return out

    return body


# JobOut's last fields, given beside the job rather than read from it.
BESIDE_THE_JOB = ("attempts", "heartbeat")
# JobOut's fields read from a job attribute of another name: run_at as given, not parked
# behind its `after`; the timeout in seconds.
JOB_READ_FROM = {"run_at": "own_run_at", "timeout": "timeout_seconds"}
_job_fields = _body_of(
    [f for f in JobOut.model_fields if f not in BESIDE_THE_JOB],
    JOB_READ_FROM,
    {"state": attrgetter("value"), "timeout": float, "critical": bool, "cancel_requested": bool},
)
_attempt_body = _body_of(AttemptOut.model_fields)
_heartbeat_body = _body_of(HeartbeatOut.model_fields, {"at": "beat_at"})


def job_body(
    job: Job, attempts: list[Attempt] | None = None, heartbeat: Heartbeat | None = None
) -> dict[str, Any]:
    """``JobOut``'s fields as plain values, in its order: the routes that answer one job
    write this with orjson, the JSON pydantic would write, without building and
    validating a model on each answer (which cost more than the rest of a GET's own work)."""
    body = _job_fields(job)
    body["attempts"] = None if attempts is None else [_attempt_body(a) for a in attempts]
    body["heartbeat"] = None if heartbeat is None else _heartbeat_body(heartbeat)
    return body


class JobRef(BaseModel):
    id: int = Field(description="the job's id")
    state: str = Field(description="its state")
    queue: str = Field(description="the queue it runs in")
    run_at: datetime = Field(description="not before this instant")


class BatchOut(BaseModel):
    id: int = Field(description="the batch's id")
    total: int = Field(description="its jobs")
    pending: int = Field(description="its jobs not finished yet")
    completed: int = Field(description="its completed jobs")
    failed: int = Field(description="its failed jobs")
    cancelled: int = Field(description="its cancelled jobs")
    on_complete: str | None = Field(description="the type of its completion job")
    completion_job_id: int | None = Field(description="its completion job")
    notify: list[str] | None = Field(description="targets told once it finishes")
    created_at: datetime = Field(description="when it was made")
    finished_at: datetime | None = Field(
        description="when it finished (sealed, and none pending): its completion and "
        "notifications fired, no job may join it"
    )
    sealed_at: datetime | None = Field(
        description="when it was sealed (a batch POST's at once); null: open, jobs may "
        "join and it cannot finish"
    )
    owner: str | None = Field(
        None,
        description="the tenant (restricted token) that made it, which alone of the "
        "tenants may name it; null: made by an unrestricted caller",
    )
    status: Literal["open", "sealed", "finished"] = Field(
        description="open (jobs join, it cannot finish), sealed (it finishes once none is "
        "pending; jobs may still join), finished"
    )


class BatchListOut(BaseModel):
    batches: list[BatchOut] = Field(description="this page, newest first")
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class JobBatchOut(BaseModel):
    batch_id: int | None = Field(None, description="the batch made of them (with batch)")
    count: int = Field(description="jobs created (or replayed)")
    jobs: list[JobRef] = Field(description="one per job of the request, in its order")


class JobListOut(BaseModel):
    jobs: list[JobOut] = Field(description="a page of jobs, newest first")
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class LimitsOut(BaseModel):
    throttlers: list[dict[str, Any]] = Field(
        description="each configured throttler's adjustable settings in force (overrides "
        'applied), e.g. [{"share": {"shares": {"east": 40, "west": 60}}}, {"window": {}}]'
    )
    overrides: dict[str, Any] = Field(
        description="what an operator changed ({} : the config's values), in the shape of "
        "PATCH /v1/queues/{name}/limits"
    )
    changed_at: datetime | None = Field(description="when the limits were last changed or reset")
    changed_by: str | None = Field(
        description="the name of the token that changed them (anonymous without tokens)"
    )


class QueueOut(BaseModel):
    name: str = Field(description="the queue's name in the config")
    concurrency: int | None = Field(
        description="capacity units in force (an operator's change applied); null is unlimited"
    )
    order: str = Field(description="the order due jobs are admitted in")
    round_robin_label: str | None = Field(
        None, description="the label whose values take turns before the order; null: none"
    )
    batch_interval: float = Field(description="seconds between the loop's ticks")
    batch_size: int = Field(description="due jobs read per tick at most")
    throttlers: list[str] = Field(description="its throttlers, in order")
    paused: bool = Field(description="admits no job while paused")
    forbidden_flags: list[str] = Field(
        default_factory=list, description="jobs with one of these flags wait"
    )
    limits: LimitsOut | None = Field(
        None, description="the limits in force and who changed them at run time"
    )
    owner: str | None = Field(description="the process whose loop runs this queue now")
    scheduled: int = Field(description="jobs scheduled (due or not)")
    due: int = Field(description="scheduled jobs whose run_at has come")
    oldest_due_at: datetime | None = Field(
        None,
        description="the run_at of the due job that has waited longest: now minus it is "
        "the queue's latency; null when none is due",
    )
    waiting_reason: str | None = Field(
        None,
        description="what holds every due job of the queue: paused, full, or run by no "
        "process; null when nothing does (its jobs then say what holds each)",
    )
    running: int = Field(description="jobs being sent or run")
    awaiting: int = Field(description="jobs sent, awaiting their response")
    failed: int = Field(description="jobs failed for good")
    capacity_in_use: int = Field(description="weight held by running and awaiting jobs")
    in_use_by: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="capacity in use per value of each label the throttlers use",
    )
    held_by: dict[str, int] = Field(
        default_factory=dict, description="due jobs each throttler held at the last tick"
    )
    throttler_errors: dict[str, int] = Field(
        default_factory=dict, description="faults per throttler since this owner took the queue"
    )
    throttler_state: dict[str, Any] = Field(
        default_factory=dict,
        description="what adapting throttlers learned, per throttler (adaptive: the start "
        "rate per label value, overload answers seen, a Retry-After pause)",
    )


class QueueListOut(BaseModel):
    queues: list[QueueOut] = Field(description="every configured queue, by name")


class ProcessOut(BaseModel):
    id: str = Field(description="the process's name, as queues show their owner")
    host: str = Field(description="the host it runs on")
    pid: int = Field(description="its process id on that host")
    started_at: datetime = Field(description="when it started")
    heartbeat_at: datetime = Field(description="its last heartbeat (every lease_ttl / 3)")
    queues: list[str] = Field(description="the queues it may run (serve_queues, --queues)")
    version: str | None = Field(
        None, description="the hipq version it runs (null: a process older than 0031)"
    )
    owned: list[str] = Field(description="the queues whose loop it runs now")
    in_flight: int = Field(description="running and awaiting jobs of the queues it runs")
    in_flight_by_queue: dict[str, dict[str, int]] = Field(
        description="per queue it runs: its jobs running and awaiting a response, "
        'e.g. {"default": {"running": 2, "awaiting": 0}}'
    )


class ProcessListOut(BaseModel):
    processes: list[ProcessOut] = Field(
        description="the live processes (heartbeat within lease_ttl), oldest first"
    )


class ReadyOut(BaseModel):
    status: Literal["ready", "not ready"] = Field(description="ready: a job can be accepted now")
    problems: dict[str, str] = Field(
        description="what keeps hipq from being ready, by part (database, service, listen, "
        "kafka_producer, kafka_consumer, connections); empty when ready"
    )
    owner: str | None = Field(
        None, description="this process (host:pid:id); only for a caller with the read scope"
    )
    queues_owned: list[str] | None = Field(
        None,
        description="the queues whose loop this process runs; only for a caller with the "
        "read scope (their names are the config's)",
    )
    listener: bool | None = Field(
        description="PostgreSQL LISTEN connection up; null where it is not used"
    )
    kafka_producer: bool | None = Field(
        description="connected to the Kafka broker; null without Kafka transports"
    )
    kafka_consumer: bool | None = Field(
        description="consuming response topics; null without Kafka responses"
    )


class ErrorItem(BaseModel):
    field: str | None = Field(description="the field at fault, as a path (jobs[2].type)")
    message: str = Field(description="what is wrong with it")


class ErrorOut(BaseModel):
    error: str = Field(description="a short code, e.g. invalid_request, not_found, conflict")
    field: str | None = Field(description="the first field at fault")
    message: str = Field(description="the first problem, prefixed with its field")
    errors: list[ErrorItem] = Field(default_factory=list, description="every problem found")


class BulkFilterIn(_In):
    """Which jobs a bulk operation touches: every condition given must hold."""

    queue: str | None = Field(None, min_length=1, max_length=200, description="in this queue")
    states: list[
        Literal["scheduled", "running", "awaiting", "completed", "failed", "cancelled"]
    ] = Field(default_factory=list, max_length=6, description="in one of these states")
    type: str | None = Field(None, min_length=1, max_length=200, description="of this job type")
    labels: dict[str, str] = Field(
        default_factory=dict, max_length=20, description="with every one of these labels"
    )
    ids: list[Annotated[int, Field(ge=1, le=MAX_ID)]] = Field(
        default_factory=list, max_length=10_000, description="one of these ids"
    )
    job_key: str | None = Field(
        None, min_length=1, max_length=KEY_MAX_LENGTH, description="holding this job_key"
    )
    created_after: RunAt | None = Field(None, description="created at or after this instant")
    created_before: RunAt | None = Field(None, description="created before this instant")
    finished_after: RunAt | None = Field(None, description="finished at or after this instant")
    finished_before: RunAt | None = Field(None, description="finished before this instant")
    error_contains: str | None = Field(
        None, min_length=1, max_length=1000, description="text in the job's last_error"
    )


class BulkIn(_In):
    action: Literal["cancel", "retry", "reschedule", "complete", "fail", "delete"] = Field(
        description="the verb applied to each job the filter matches"
    )
    filter: BulkFilterIn = Field(description="at least one condition")
    dry_run: StrictBool = Field(False, description="only count the jobs the filter matches")
    reason: str | None = Field(None, min_length=1, max_length=2000, description="cancel, fail")
    result: Any = Field(None, description="complete: the jobs' result")
    run_at: RunAt | None = Field(None, description="reschedule, retry: not before this instant")
    run_in: Duration | None = Field(None, description="reschedule, retry: not before this long")
    priority: StrictInt | None = Field(None, ge=-_INT32, le=_INT32, description="reschedule")
    reset_attempts: StrictBool = Field(False, description="reschedule")
    max_attempts: StrictInt | None = Field(None, ge=1, le=10_000, description="reschedule")


class BulkCountOut(BaseModel):
    dry_run: bool = Field(True, description="always true: nothing was changed")
    matched: int = Field(description="jobs the filter matches now")


class BulkOut(BaseModel):
    id: int = Field(description="the bulk operation's id")
    action: str = Field(description="the verb it applies")
    filter: dict[str, Any] = Field(description="the jobs it applies to")
    params: dict[str, Any] = Field(description="the verb's parameters")
    state: Literal["running", "done", "failed"] = Field(description="where it stands")
    matched: int = Field(description="jobs the filter matched so far")
    changed: int = Field(description="jobs changed at once")
    requested: int = Field(description="jobs in flight, asked of their queue's loop")
    skipped: int = Field(description="jobs the action does not apply to in their state")
    error: str | None = Field(description="why it failed")
    created_at: datetime = Field(description="when it was asked for")
    updated_at: datetime = Field(description="when its counts last moved")
    finished_at: datetime | None = Field(description="when it was done or failed")


class BulkListOut(BaseModel):
    operations: list[BulkOut] = Field(description="the latest operations, newest first")
