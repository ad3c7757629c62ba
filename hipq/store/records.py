"""Parameter and result records of the store's methods."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hipq.jobs import Job


class StoreError(Exception):
    """Base of the errors the store reports to its callers about their request."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.field = message, field


class NotFound(StoreError):
    """The job or response named does not exist."""


class Conflict(StoreError):
    """A uniqueness rule or a job's state refuses the change."""


class BadReference(Conflict):
    """A request names what does not exist or cannot be (a job ``after`` names)."""


class StoreSetupError(RuntimeError):
    """The database cannot be used as configured (message says why)."""


class LeaseLost(Exception):
    """This process no longer owns the queue: its batch was rolled back, nothing changed."""


@dataclass(frozen=True, slots=True)
class JobFilter:
    queue: str | None = None
    states: tuple[str, ...] = ()
    type: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    job_key: str | None = None
    after_id: int | None = None  # cursor: jobs with a smaller id (newest first)
    limit: int = 100


@dataclass(frozen=True, slots=True)
class InsertResult:
    jobs: list[Job]
    replayed: bool = False  # an Idempotency-Key matched an earlier request


@dataclass(frozen=True, slots=True)
class QueueCounts:
    scheduled: int = 0
    due: int = 0
    oldest_due_at: datetime | None = None  # the run_at of the due job waiting longest
    running: int = 0
    awaiting: int = 0
    failed: int = 0
    weight_in_flight: int = 0
    paused: bool = False
    forbidden_flags: tuple[str, ...] = ()
    lease_owner: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)  # written by the owner's loop
    limits: dict[str, Any] = field(default_factory=dict)  # an operator's overrides
    limits_changed_at: datetime | None = None
    limits_changed_by: str | None = None


@dataclass(frozen=True, slots=True)
class QueueGauges:
    """A queue's jobs by what an alert asks of them (``hipq_queue_*`` gauges)."""

    backlog: int = 0  # scheduled and due: waiting for the loop to admit them
    scheduled: int = 0  # scheduled, due or not
    running: int = 0
    awaiting: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class NewResponse:
    """A correlated response as received (webhook or Kafka), with its decided outcome."""

    correlation_key: str
    source: str
    succeeded: bool
    reason: str | None = None
    body: Any = None
    headers: dict[str, str] | None = None
    job_type: str | None = None
    fingerprint: str | None = None  # tells a copy from a new response (response_intake)


@dataclass(frozen=True, slots=True)
class Response:
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
    fingerprint: str | None = None
    job_attempt: int | None = None  # the attempt a matched response settled


@dataclass(frozen=True, slots=True)
class ParkedMessage:
    source: str
    reason: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    value: str | None = None


@dataclass(frozen=True, slots=True)
class Match:
    """A pending response paired with the in-flight job it settles."""

    response: Response
    job_id: int
