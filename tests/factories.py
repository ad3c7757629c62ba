"""Builders of the core's records for tests: every field has a default, a test names
only what it is about."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hipq.jobs import Job
from hipq.lifecycle import State

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def make_job(**fields: Any) -> Job:
    """A running job of type ``ok`` in queue ``default``, claimed at ``NOW``; ``fields``
    override any of its fields."""
    base: dict[str, Any] = dict(
        id=1,
        type="ok",
        queue="default",
        state=State.RUNNING,
        payload={},
        run_at=NOW,
        priority=100,
        weight=1,
        labels={},
        windows=None,
        timeout_seconds=60.0,
        retry={},
        attempt=1,
        created_at=NOW,
        updated_at=NOW,
        claimed_at=NOW,
    )
    base.update(fields)
    return Job(**base)


def numbered_job(job_id: int = 1, **fields: Any) -> Job:
    """A job whose payload names it (``{"n": id}``), retried by the fixed strategy."""
    return make_job(
        **{"id": job_id, "payload": {"n": job_id}, "retry": {"strategy": "fixed"}, **fields}
    )


def seconds_after_now(at: datetime) -> float:
    """Seconds from ``NOW`` to ``at``."""
    return (at - NOW).total_seconds()
