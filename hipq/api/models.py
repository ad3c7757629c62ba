"""The REST API's request and response bodies (pydantic lives at the edges only)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
)

from hipq.jobs import Attempt, Job
from hipq.store.schema import KEY_MAX_LENGTH

# Ids are BIGINT (PostgreSQL) / INTEGER (SQLite): a larger number is a 422, not a driver error.
MAX_ID = 2**63 - 1

_INT32 = 2**31 - 1
# Instants outside this range are client bugs, and near datetime's limits the window
# and deadline arithmetic would overflow.
_EARLIEST, _LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC)


def _plausible(value: datetime) -> datetime:
    if not _EARLIEST <= value < _LATEST:
        raise ValueError("must be between 1970-01-01 and 9000-01-01")
    return value


RunAt = Annotated[AwareDatetime, AfterValidator(_plausible)]


def _duration(value: Any) -> float | str:
    # One check instead of a float | str union: a JSON true is not one second, and a
    # refusal names the field instead of each member of the union.
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("expected a duration such as '30s' or a number of seconds")
    if isinstance(value, int) and abs(value) > 2**53:  # float() would overflow or round
        raise ValueError("out of range: at most 3650d")
    return value if isinstance(value, str) else float(value)


Duration = Annotated[float | str, PlainValidator(_duration, json_schema_input_type=float | str)]


FlagName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f]+$")]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WindowIn(_In):
    start: str = Field(description="opening wall-clock time, HH:MM")
    end: str = Field(
        description="closing wall-clock time, HH:MM; earlier than start wraps midnight"
    )
    tz: str = Field("UTC", description="IANA time zone")
    days: str | list[str] | None = Field(None, description="e.g. 'mon-fri' (the day it opens)")


class RetryIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    strategy: str | None = Field(None, description="exponential, fixed, none, or a plugin")
    max_attempts: StrictInt | None = Field(None, ge=1, le=10_000)


class JobIn(_In):
    type: str = Field(min_length=1, max_length=200, description="a job type from the config")
    payload: dict[str, Any] = Field(default_factory=dict, description="a JSON object")
    queue: str | None = Field(None, max_length=200, description="default: the job type's queue")
    run_at: RunAt | None = Field(None, description="not before this instant (RFC 3339)")
    run_in: Duration | None = Field(
        None, description="not before this long from now (seconds or '10m'); not with run_at"
    )
    priority: StrictInt | None = Field(None, ge=-_INT32, le=_INT32, description="lower runs first")
    weight: StrictInt | None = Field(None, ge=1, le=1_000_000, description="capacity units")
    labels: dict[str, str] = Field(default_factory=dict, description="used by throttlers")
    windows: list[WindowIn] | None = Field(None, max_length=100)
    timeout: Duration | None = Field(None, description="seconds, or a duration such as '24h'")
    retry: RetryIn | None = None
    correlation_key: str | None = Field(None, min_length=1, max_length=KEY_MAX_LENGTH)
    job_key: str | None = Field(None, min_length=1, max_length=KEY_MAX_LENGTH)
    job_key_mode: Literal["replace", "preserve_run_at", "unsafe_dedupe"] | None = None
    critical: StrictBool = Field(
        False, description="passes throttlers that let critical work through"
    )
    flags: list[FlagName] | None = Field(
        None, max_length=20, description="an operator may forbid flags on a queue at run time"
    )

    def fields_set(self) -> dict[str, Any]:
        """As ``model_dump(exclude_unset=True, exclude_none=True)``, at a third of its cost
        (the batch path calls it per job): only the nested models are dumped."""
        data: dict[str, Any] = {}
        for name in self.model_fields_set:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, BaseModel):
                value = value.model_dump(exclude_unset=True, exclude_none=True)
            elif name == "windows":
                value = [w.model_dump(exclude_unset=True, exclude_none=True) for w in value]
            data[name] = value
        data["type"] = self.type
        return data


class JobBatchIn(_In):
    jobs: list[JobIn] = Field(min_length=1)


class JobPatch(_In):
    run_at: RunAt | None = None
    priority: StrictInt | None = Field(None, ge=-_INT32, le=_INT32)
    payload: dict[str, Any] | None = None
    weight: StrictInt | None = Field(None, ge=1, le=1_000_000)
    labels: dict[str, str] | None = None
    windows: list[WindowIn] | None = None
    timeout: Duration | None = None


class RetryRequest(_In):
    run_at: RunAt | None = None


class CompleteRequest(_In):
    result: Any = Field(None, description="the job's result, any JSON value")


class FailRequest(_In):
    reason: str = Field(min_length=1, max_length=2000, description="why, kept as last_error")


class CancelRequest(_In):
    reason: str | None = Field(
        None, min_length=1, max_length=2000, description="kept as last_error"
    )


class ForbiddenFlagsIn(_In):
    flags: list[FlagName] = Field(max_length=100, description="replaces the queue's set")


class RescheduleRequest(_In):
    run_at: RunAt | None = Field(None, description="run not before this instant; default now")
    run_in: Duration | None = Field(None, description="run not before this long from now")
    priority: StrictInt | None = Field(None, ge=-_INT32, le=_INT32, description="lower runs first")
    reset_attempts: StrictBool = Field(False, description="count attempts from 0 again")
    max_attempts: StrictInt | None = Field(
        None, ge=1, le=10_000, description="the job's retry max_attempts from now on"
    )


class AttemptOut(BaseModel):
    attempt: int
    started_at: datetime | None
    finished_at: datetime
    outcome: str
    error: str | None = None
    response: Any = None

    @classmethod
    def of(cls, a: Attempt) -> AttemptOut:
        return cls(
            attempt=a.attempt,
            started_at=a.started_at,
            finished_at=a.finished_at,
            outcome=a.outcome,
            error=a.error,
            response=a.response,
        )


class JobOut(BaseModel):
    id: int
    type: str
    queue: str
    state: str
    payload: dict[str, Any]
    run_at: datetime
    priority: int
    weight: int
    labels: dict[str, str]
    windows: list[dict[str, Any]] | None
    timeout: float = Field(description="seconds")
    retry: dict[str, Any]
    critical: bool
    correlation_key: str | None
    job_key: str | None
    attempt: int
    created_at: datetime
    updated_at: datetime
    claimed_at: datetime | None
    deadline: datetime | None
    finished_at: datetime | None
    result: Any
    last_error: str | None
    waiting_reason: str | None = Field(description="why a due job still waits (its throttler)")
    cancel_requested: bool
    flags: list[str] | None = None
    attempts: list[AttemptOut] | None = None

    @classmethod
    def of(cls, job: Job, attempts: list[Attempt] | None = None) -> JobOut:
        return cls(
            id=job.id,
            type=job.type,
            queue=job.queue,
            state=job.state.value,
            payload=job.payload,
            run_at=job.run_at,
            priority=job.priority,
            weight=job.weight,
            labels=job.labels,
            windows=job.windows,
            timeout=job.timeout_seconds,
            retry=job.retry,
            critical=job.critical,
            correlation_key=job.correlation_key,
            job_key=job.job_key,
            attempt=job.attempt,
            created_at=job.created_at,
            updated_at=job.updated_at,
            claimed_at=job.claimed_at,
            deadline=job.deadline,
            finished_at=job.finished_at,
            result=job.result,
            last_error=job.last_error,
            waiting_reason=job.waiting_reason,
            cancel_requested=job.cancel_requested,
            flags=job.flags,
            attempts=None if attempts is None else [AttemptOut.of(a) for a in attempts],
        )


class JobRef(BaseModel):
    id: int
    state: str
    queue: str
    run_at: datetime


class JobBatchOut(BaseModel):
    count: int
    jobs: list[JobRef]


class JobListOut(BaseModel):
    jobs: list[JobOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class QueueOut(BaseModel):
    name: str
    concurrency: int | None = Field(description="capacity units; null is unlimited")
    order: str
    batch_interval: float
    batch_size: int
    throttlers: list[str]
    paused: bool
    forbidden_flags: list[str] = Field(
        default_factory=list, description="jobs with one of these flags wait"
    )
    owner: str | None = Field(description="the process whose loop runs this queue now")
    scheduled: int
    due: int
    running: int
    awaiting: int
    failed: int
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


class QueueListOut(BaseModel):
    queues: list[QueueOut]


class ReadyOut(BaseModel):
    status: Literal["ready", "not ready"] = Field(description="ready: a job can be accepted now")
    problems: dict[str, str] = Field(
        description="what keeps hipq from being ready, by part (database, service, listen, "
        "kafka_producer, kafka_consumer); empty when ready"
    )
    owner: str | None = Field(
        None, description="this process (host:pid:id); only for a caller with the read scope"
    )
    queues_owned: list[str] = Field(description="the queues whose loop this process runs")
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
    field: str | None
    message: str


class ErrorOut(BaseModel):
    error: str = Field(description="a short code, e.g. invalid_request, not_found, conflict")
    field: str | None = Field(description="the first field at fault")
    message: str
    errors: list[ErrorItem] = Field(default_factory=list)


class BulkFilterIn(_In):
    """Which jobs a bulk operation touches: every condition given must hold."""

    queue: str | None = Field(None, min_length=1, max_length=200)
    states: list[
        Literal["scheduled", "running", "awaiting", "completed", "failed", "cancelled"]
    ] = Field(default_factory=list, max_length=6)
    type: str | None = Field(None, min_length=1, max_length=200)
    labels: dict[str, str] = Field(default_factory=dict, max_length=20)
    ids: list[Annotated[int, Field(ge=1, le=MAX_ID)]] = Field(
        default_factory=list, max_length=10_000
    )
    job_key: str | None = Field(None, min_length=1, max_length=KEY_MAX_LENGTH)
    created_after: RunAt | None = None
    created_before: RunAt | None = None
    finished_after: RunAt | None = None
    finished_before: RunAt | None = None
    error_contains: str | None = Field(
        None, min_length=1, max_length=1000, description="text in the job's last_error"
    )


class BulkIn(_In):
    action: Literal["cancel", "retry", "reschedule", "complete", "fail", "delete"]
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
    dry_run: bool = True
    matched: int = Field(description="jobs the filter matches now")


class BulkOut(BaseModel):
    id: int
    action: str
    filter: dict[str, Any]
    params: dict[str, Any]
    state: Literal["running", "done", "failed"]
    matched: int = Field(description="jobs the filter matched so far")
    changed: int = Field(description="jobs changed at once")
    requested: int = Field(description="jobs in flight, asked of their queue's loop")
    skipped: int = Field(description="jobs the action does not apply to in their state")
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class BulkListOut(BaseModel):
    operations: list[BulkOut]
