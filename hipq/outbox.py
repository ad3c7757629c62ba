"""Outcome notifications: what the outbox holds and what a receiver gets.

A job that names notification targets (``notify``, its own or its type's) gets one
outbox row per target each time it reaches a terminal state (completed, failed,
cancelled). The row is written in the transaction that changes the state (a trigger
on the jobs table, alembic 0012), so a change that rolls back leaves nothing to send
and a committed one is never without its row. ``hipq.process.notifier`` sends the rows after
the commit and retries them with backoff until the receiver takes them:
at-least-once, with a message id that stays the same across the tries of one
notification, for the receiver to de-duplicate on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

# The outbox row's status: not sent yet, failed at least once (retried), or delivered.
PENDING, FAILING, SENT = "pending", "failing", "sent"
STATUSES = (PENDING, FAILING, SENT)


@dataclass(frozen=True, slots=True)
class Notification:
    """One outbox row: the outcome as it was when the job reached it, and its sending."""

    id: int
    job_id: int | None  # None: a batch's (``batch_id``), which has no job type or queue
    target: str
    job_type: str | None
    queue: str | None
    job_state: str  # completed | failed | cancelled; a batch's: finished
    attempt: int
    result: Any
    error: str | None
    finished_at: datetime | None
    created_at: datetime
    status: str
    attempts: int
    next_attempt_at: datetime
    locked_until: datetime | None
    last_error: str | None
    sent_at: datetime | None
    batch_id: int | None = None

    @property
    def key(self) -> bytes:
        """The Kafka message key: the job's id, or ``batch-<id>``."""
        return (str(self.job_id) if self.job_id is not None else f"batch-{self.batch_id}").encode()

    @property
    def message_id(self) -> str:
        """The ``webhook-id`` (and Kafka header): the same for every try of this row."""
        return f"hipq-notification-{self.id}"

    def body(self) -> bytes:
        """The JSON a receiver gets, in the Standard Webhooks payload shape
        (``type``, ``timestamp``, ``data``)."""
        at = self.finished_at or self.created_at
        if self.job_id is None:  # a batch finished: its counts (hipq.batches)
            counts = self.result if isinstance(self.result, dict) else {}
            data = {k: counts.get(k) for k in ("total", "completed", "failed", "cancelled")}
            return orjson.dumps(
                {
                    "type": "batch.finished",
                    "timestamp": at.isoformat(),
                    "data": {
                        "batch_id": self.batch_id,
                        **data,
                        "finished_at": at.isoformat(),
                        "notification_id": self.id,
                    },
                }
            )
        return orjson.dumps(
            {
                "type": f"job.{self.job_state}",
                "timestamp": at.isoformat(),
                "data": {
                    "job_id": self.job_id,
                    "job_type": self.job_type,
                    "queue": self.queue,
                    "state": self.job_state,
                    "attempt": self.attempt,
                    "result": self.result,
                    "error": self.error,
                    "finished_at": None if self.finished_at is None else at.isoformat(),
                    "notification_id": self.id,
                },
            }
        )


@dataclass(frozen=True, slots=True)
class Delivery:
    """How one try of a notification went: sent, or the error (then retried at ``retry_at``)."""

    id: int
    error: str | None = None
    retry_at: datetime | None = None


def retry_delay(attempts: int, initial: float, cap: float) -> float:
    """Seconds before the next try after ``attempts`` failed ones: doubling, capped."""
    return min(cap, initial * 2 ** max(0, min(attempts - 1, 40)))
