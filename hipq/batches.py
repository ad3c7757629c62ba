"""Batches of jobs with a completion: the records the core and the API share.

A batch POST may make its jobs a batch: the store keeps its counts (a trigger moves
a job's count as it changes state, alembic 0022), and its completion job, if it has
one, runs after every job of the batch (``after_failed: run``), once, with the
counts in its payload under ``batch``. See docs/batches.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hipq.jobs import NewJob


@dataclass(frozen=True, slots=True)
class NewBatch:
    """A batch to make of a request's jobs; ``completion``: its completion job, resolved
    (its ``after`` is filled in by the store), or None."""

    completion: NewJob | None = None


@dataclass(frozen=True, slots=True)
class Batch:
    id: int
    total: int
    completed: int
    failed: int
    cancelled: int
    on_complete: str | None
    completion_job_id: int | None
    notify: list[str] | None
    created_at: datetime
    finished_at: datetime | None

    @property
    def pending(self) -> int:
        return self.total - self.completed - self.failed - self.cancelled
