"""What the client returns: the API's response bodies as typed, read-only models.

They mirror hipq.api.models field for field (tests/client/test_units.py fails when the
two part) instead of importing them: the server's models pull in the store and
SQLAlchemy, a second of import time for every program and CLI call that only talks
HTTP. Fields a newer server adds are kept (``extra="allow"``), not refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Required, TypedDict

from pydantic import BaseModel, ConfigDict

#: The states a job leaves only by an operator's retry.
TERMINAL_STATES = frozenset({"completed", "failed", "cancelled"})


class _Out(BaseModel):
    # defer_build: a model's validator is built when it first validates, not at import
    # (a CLI call uses one or two of these; building all of them cost it ~30 ms of CPU).
    model_config = ConfigDict(extra="allow", frozen=True, defer_build=True)


class Attempt(_Out):
    """One finished attempt of a job."""

    attempt: int
    started_at: datetime | None
    finished_at: datetime
    outcome: str
    error: str | None = None
    response: Any = None
    traceback: str | None = None  # a python handler's, innermost frames (at most 8 KiB)


class Heartbeat(_Out):
    """The last heartbeat an external system sent for a job, with its progress."""

    at: datetime
    attempt: int
    deadline: datetime
    progress: Any


class Job(_Out):
    """A job as ``GET /v1/jobs/{id}`` answers it (``attempts`` only from that route)."""

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
    timeout: float
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
    waiting_reason: str | None
    cancel_requested: bool
    flags: list[str] | None = None
    notify: list[str] | None = None  # the notification targets told of its outcome
    after: list[int] | None = None  # the ids of the jobs it runs after
    after_failed: str | None = None  # cancel | run: what a failed one does to it
    waiting_for: int | None = None  # how many of those have not finished (a completion: 1)
    batch_id: int | None = None  # the batch it belongs to
    attempts: list[Attempt] | None = None
    heartbeat: Heartbeat | None = None

    @property
    def terminal(self) -> bool:
        """completed, failed or cancelled."""
        return self.state in TERMINAL_STATES


class JobRef(_Out):
    """A job created by a batch: its id and where it stands."""

    id: int
    state: str
    queue: str
    run_at: datetime


class AddedBatch(_Out):
    """The jobs :meth:`Client.add_batch` made, and their batch."""

    batch_id: int
    jobs: list[JobRef]


class Batch(_Out):
    """A batch's counts (``GET /v1/batches/{id}``); ``finished_at`` once it is sealed
    and none of its jobs is pending."""

    id: int
    total: int
    pending: int
    completed: int
    failed: int
    cancelled: int
    on_complete: str | None
    completion_job_id: int | None
    notify: list[str] | None
    created_at: datetime
    finished_at: datetime | None
    sealed_at: datetime | None  # None: open, jobs may join and it cannot finish
    owner: str | None = None  # the tenant that made it; None: an unrestricted caller
    status: Literal["open", "sealed", "finished"]


class BatchPage(_Out):
    batches: list[Batch]
    next_cursor: str | None


class JobPage(_Out):
    jobs: list[Job]
    next_cursor: str | None


class Queue(_Out):
    """A queue's config and live counts."""

    name: str
    concurrency: int | None
    order: str
    round_robin_label: str | None = None
    batch_interval: float
    batch_size: int
    throttlers: list[str]
    paused: bool
    forbidden_flags: list[str] = []
    # The limits in force, an operator's overrides, and who changed them when.
    limits: dict[str, Any] | None = None
    owner: str | None
    scheduled: int
    due: int
    oldest_due_at: datetime | None = None
    waiting_reason: str | None = None
    running: int
    awaiting: int
    failed: int
    capacity_in_use: int
    in_use_by: dict[str, dict[str, int]] = {}
    held_by: dict[str, int] = {}
    throttler_errors: dict[str, int] = {}
    throttler_state: dict[str, Any] = {}


class Response(_Out):
    """A response in the inbox (a callback or a Kafka response)."""

    id: int
    correlation_key: str
    source: str
    received_at: datetime
    expires_at: datetime
    succeeded: bool
    reason: str | None
    body: Any
    headers: dict[str, str] | None
    job_type: str | None
    status: str
    job_id: int | None
    forced_job_id: int | None
    settled_at: datetime | None


class ResponsePage(_Out):
    responses: list[Response]
    next_cursor: str | None


class BulkCount(_Out):
    """A bulk operation's dry run: how many jobs its filter matches now."""

    dry_run: bool = True
    matched: int


class BulkOperation(_Out):
    """A bulk operation and its progress (``state``: running, done, failed)."""

    id: int
    action: str
    filter: dict[str, Any]
    params: dict[str, Any]
    state: str
    matched: int
    changed: int
    requested: int
    skipped: int
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class Schedule(_Out):
    """A recurring job: its cron, its job template and its next fire time."""

    name: str
    source: str
    cron: str
    timezone: str
    job: dict[str, Any]
    catch_up: str
    backfill_seconds: float
    overlap: str
    paused: bool
    pause_on_failure: bool
    paused_reason: str | None  # why the scheduler paused it (pause_on_failure)
    next_fire_time: datetime | None
    checked_until: datetime
    created_at: datetime
    updated_at: datetime


class FireTimes(_Out):
    name: str
    fire_times: list[datetime]


class Fire(_Out):
    fire_time: datetime
    outcome: str
    job_id: int | None


class Fires(_Out):
    name: str
    fires: list[Fire]


class ScheduleRun(_Out):
    """The job a schedule made when told to run now."""

    fire_time: datetime
    job: Job


# -- what the client sends ----------------------------------------------------------------


class JobFields(TypedDict, total=False):
    """A new job's optional fields (docs/reference-api.md); the server fills the rest."""

    queue: str
    run_at: datetime | str
    priority: int
    weight: int
    labels: Mapping[str, str]
    windows: Sequence[Mapping[str, Any]]
    run_in: float | str
    timeout: float | str
    retry: Mapping[str, Any]
    correlation_key: str
    job_key: str
    job_key_mode: Literal["replace", "preserve_run_at", "unsafe_dedupe"]
    unique_for: float | str  # with job_key: seconds or a duration such as "1h"
    critical: bool
    flags: Sequence[str]
    notify: Sequence[str]  # names of notifications.targets; [] tells no one
    # Jobs it runs after: ids, or job keys (a job of the same add_jobs call first).
    after: Sequence[int | str]
    after_failed: Literal["cancel", "run"]  # if one of them fails: default cancel
    batch_id: int  # joins this batch (open, or sealed and not finished)


class NewJob(JobFields, total=False):
    """One job of :meth:`Client.add_jobs`."""

    type: Required[str]
    payload: Mapping[str, Any]


class JobChanges(TypedDict, total=False):
    """What :meth:`Client.change_job` may change on a scheduled job."""

    run_at: datetime | str
    priority: int
    payload: Mapping[str, Any]
    weight: int
    labels: Mapping[str, str]
    windows: Sequence[Mapping[str, Any]]
    timeout: float | str


BulkAction = Literal["cancel", "retry", "reschedule", "complete", "fail", "delete"]


class Reschedule(TypedDict, total=False):
    """How :meth:`Client.reschedule_job` (and a bulk reschedule) moves a job."""

    run_at: datetime | str
    run_in: float | str
    priority: int
    reset_attempts: bool
    max_attempts: int


class BulkFilter(TypedDict, total=False):
    """Which jobs a bulk operation touches: every condition given must hold."""

    queue: str
    states: Sequence[str]
    type: str
    labels: Mapping[str, str]
    ids: Sequence[int]
    job_key: str
    created_after: datetime | str
    created_before: datetime | str
    finished_after: datetime | str
    finished_before: datetime | str
    error_contains: str


class BulkParams(Reschedule, total=False):
    """What a bulk action needs: ``reason`` (cancel, fail), ``result`` (complete), the
    reschedule fields (reschedule; run_at and run_in for retry too)."""

    reason: str
    result: Any


class ScheduleFields(TypedDict, total=False):
    """A schedule's optional fields (see docs/schedules.md)."""

    timezone: str
    catch_up: Literal["none", "latest", "all"]
    backfill: float | str
    overlap: Literal["allow", "skip", "buffer_one", "cancel_other"]
    paused: bool
    pause_on_failure: bool


class ScheduleChanges(TypedDict, total=False):
    cron: str
    timezone: str
    job: Mapping[str, Any]
    catch_up: Literal["none", "latest", "all"]
    backfill: float | str
    overlap: Literal["allow", "skip", "buffer_one", "cancel_other"]
    pause_on_failure: bool


class FetchedJob(_Out):
    """A job a pull worker took (``fetch_jobs``): report on it with its ``token``."""

    id: int
    type: str
    queue: str
    attempt: int
    token: str
    payload: dict[str, Any]
    labels: dict[str, str]
    priority: int
    weight: int
    critical: bool
    timeout: float
    heartbeat_timeout: float | None
    deadline: datetime | None


class WorkerReport(_Out):
    """A pull worker's report, stored: its job settles at its queue loop's next tick."""

    status: str = "accepted"
    job_id: int
    attempt: int


class ReportResult(_Out):
    """What became of one report of ``report_outcomes``: ``accepted`` (stored, settled at
    its queue loop's next tick), ``conflict`` (the token does not hold the job's claim,
    or the claim took another outcome: nothing changed) or ``not_found``."""

    id: int
    status: str
    attempt: int | None = None
    field: str | None = None
    message: str | None = None


class WorkerBeat(WorkerReport):
    """A pull worker's heartbeat or checkpoint, stored, with the deadline it sets."""

    deadline: datetime
