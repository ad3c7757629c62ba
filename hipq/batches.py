"""Batches of jobs with a completion: the records the core and the API share.

A batch is made by a batch POST with ``batch`` (made, joined by the request's jobs
and sealed at once) or open by ``POST /v1/batches``, and jobs join it by its id until
it finishes. Its counts are kept in the database (a trigger moves a job's count as it
changes state, alembic 0022); once it is sealed and none of its jobs is pending it
finishes, once: its completion job, if it has one, runs with the counts in its
payload under ``batch``, and its ``notify`` targets are told (alembic 0024). A join
that comes after the finish is refused, as is one of an unknown batch.
See docs/batches.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hipq.jobs import NewJob


@dataclass(frozen=True, slots=True)
class NewBatch:
    """A batch to make; ``completion``: its completion job, resolved, or None;
    ``notify``: the notification targets told when it finishes; ``owner``: the tenant
    (restricted token) that makes it, None for an unrestricted caller."""

    completion: NewJob | None = None
    notify: list[str] | None = None
    owner: str | None = None


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
    sealed_at: datetime | None
    owner: str | None = None

    @property
    def pending(self) -> int:
        return self.total - self.completed - self.failed - self.cancelled

    @property
    def status(self) -> str:
        """open (jobs may join, it cannot finish), sealed (it finishes once none is
        pending; jobs may still join), or finished."""
        if self.finished_at is not None:
            return "finished"
        return "open" if self.sealed_at is None else "sealed"


_WAITS_FOR = "waits for batch {} to finish"


def waiting_reason(batch_id: int) -> str:
    """What a completion job waits for."""
    return _WAITS_FOR.format(batch_id)


def waited_batch(reason: str | None) -> int | None:
    """The batch a completion job waits for, from its ``waiting_reason``; None for any
    other reason."""
    head, _, tail = _WAITS_FOR.partition("{}")
    if reason is None or not reason.startswith(head) or not reason.endswith(tail):
        return None
    found = reason[len(head) : len(reason) - len(tail)]
    return int(found) if found.isdigit() else None
