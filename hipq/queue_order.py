"""A queue's order of due jobs, written once.

The store's due scan sorts by it in SQL, and the loop, when it merges several reads
of one tick, sorts by it in Python: both build their key here, from SQL column
expressions or from a job's values.
"""

from __future__ import annotations

from typing import Any

from hipq.jobs import Job


def order_key(
    order: str, aging: float | None, *, run_at: Any, priority: Any, id: Any, epoch: Any
) -> tuple[Any, ...]:
    """The sort key of the queue's ``order`` over the given terms (``epoch``: run_at
    in seconds since 1970).

    With ``aging`` (priority_time only) the effective priority is
    ``priority - waited / aging``; since "now" is the same for every job this orders
    by ``priority + epoch(run_at) / aging``.
    """
    if order == "time_priority":
        return (run_at, priority, id)
    if aging:
        return (priority + epoch / aging, id)
    return (priority, run_at, id)


def job_order_key(order: str, aging: float | None, job: Job) -> tuple[Any, ...]:
    return order_key(
        order,
        aging,
        run_at=job.run_at,
        priority=job.priority,
        id=job.id,
        epoch=job.run_at.timestamp(),
    )
