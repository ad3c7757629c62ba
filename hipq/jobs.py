"""Immutable records of jobs and attempts as the core sees them (pydantic stays at the edges)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from hipq.lifecycle import State

DEFAULT_PRIORITY = 100
DEFAULT_TIMEOUT_SECONDS = 24 * 3600.0


class Job(NamedTuple):
    """A job as the core sees it: immutable (``job._replace(...)`` makes a changed copy).

    A NamedTuple rather than a frozen dataclass: the loop builds up to a batch of
    these per tick, and a frozen dataclass costs ~25 µs to build against ~1 µs here.
    """

    id: int
    type: str
    queue: str
    state: State
    payload: dict[str, Any]
    run_at: datetime
    priority: int
    weight: int
    labels: dict[str, str]
    windows: list[dict[str, Any]] | None
    timeout_seconds: float
    retry: dict[str, Any]
    attempt: int  # number of the current (or last) attempt; 0 before the first claim
    created_at: datetime
    updated_at: datetime
    critical: bool = False
    correlation_key: str | None = None
    job_key: str | None = None
    claimed_at: datetime | None = None
    deadline: datetime | None = None
    finished_at: datetime | None = None
    result: Any = None
    last_error: str | None = None
    waiting_reason: str | None = None
    cancel_requested: bool = False
    trace_context: str | None = None  # the enqueue's traceparent (hipq.observability.tracing)
    flags: list[str] | None = None  # a queue may forbid some (hipq.forbidden_flags)
    notify: list[str] | None = None  # notification targets of its outcome (hipq.outbox)
    # The jobs it runs after (hipq.dependencies): their ids, what a failed one does
    # to it, how many are unfinished, and its own run_at while it waits.
    after: list[int] | None = None
    after_failed: str | None = None
    waiting_for: int | None = None
    after_run_at: datetime | None = None
    batch_id: int | None = None  # the batch it belongs to (hipq.batches)

    @property
    def own_run_at(self) -> datetime:
        """Its run_at as given: while it waits for jobs the stored one is parked."""
        return self.after_run_at if self.waiting_for and self.after_run_at else self.run_at

    def defensive_copy(self) -> Job:
        """A deep copy that a plugin may inspect or mutate without touching the loop's view."""
        return self._replace(
            payload=copy.deepcopy(self.payload),
            labels=dict(self.labels),
            windows=copy.deepcopy(self.windows),
            retry=copy.deepcopy(self.retry),
            result=copy.deepcopy(self.result),
        )


@dataclass(frozen=True, slots=True)
class NewJob:
    """A job ready to insert: the API and the scheduler resolved every default already."""

    type: str
    queue: str
    payload: dict[str, Any]
    run_at: datetime
    priority: int = DEFAULT_PRIORITY
    weight: int = 1
    labels: dict[str, str] = field(default_factory=dict)
    windows: list[dict[str, Any]] | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    retry: dict[str, Any] = field(default_factory=dict)
    critical: bool = False
    correlation_key: str | None = None
    job_key: str | None = None
    job_key_mode: str = "replace"
    # A job_key's period of uniqueness: a job with the key created within it is returned
    # instead, whatever its state (not a column: decided at insert, hipq.store.jobs).
    unique_for_seconds: float | None = None
    trace_context: str | None = None  # the enqueue's traceparent (hipq.observability.tracing)
    flags: list[str] | None = None
    notify: list[str] | None = None  # notification targets of its outcome (hipq.outbox)
    # Jobs it runs after, as the client named them: ids (int) or job keys (str),
    # resolved to ids by the store (hipq.dependencies); "cancel" or "run" if one fails.
    after: list[int | str] | None = None
    after_failed: str | None = None
    batch_id: int | None = None  # the batch it joins (hipq.batches), or its request's
    # Its owner: a restricted token's tenant, '' for the service (docs/security.md).
    tenant: str = ""


@dataclass(frozen=True, slots=True)
class Attempt:
    job_id: int
    attempt: int
    started_at: datetime | None
    finished_at: datetime
    outcome: str  # completed | failed | retried | timeout | cancelled
    error: str | None = None
    response: Any = None
    # A python handler's exception, its innermost frames (bounded: hipq.transports.python).
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class Start:
    """A recent start of a job in this queue (for rate limits)."""

    at: datetime
    labels: Mapping[str, str]
    critical: bool = False
