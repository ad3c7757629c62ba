"""Why a job has not started yet, for every cause, as a reader of the job is told.

The queue's loop stores the reason of what it decided about a job it read (a
throttler held it, a closed window deferred it, a forbidden flag holds it), and the
intake stores what a job waits for (the jobs it runs after, its batch). Some causes
are not the loop's decision about that job, so nothing is stored on it: its run_at
has not come, its queue is paused, full (the loop reads no due job then), or run by
no process. Those are read from the job and its queue when the job is shown.
Pure: the store reads the queue's row, the API and the dashboard call ``why``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hipq.jobs import Job
from hipq.lifecycle import State

PAUSED = "queue paused"
NO_OWNER = "no process runs its queue"
UNREAD = "due: its queue's loop has not read it yet"
# The key of a queue's stats (``hipq_queues.stats``) that names what holds every due
# job of the queue, written by its loop (a full queue reads no due job).
HOLDS_ALL = "holds_all"


def queue_full(in_use: int, capacity: int) -> str:
    """The reason of every due job of a queue whose capacity is in use."""
    return f"queue full: concurrency {in_use}/{capacity} in use"


def of_queue(paused: bool, owned: bool, stats: dict[str, object] | None) -> str | None:
    """What holds every due job of a queue, from its row: paused, run by no live
    process, or what its loop's last tick said (full); None if nothing does."""
    if paused:
        return PAUSED
    if not owned:
        return NO_OWNER
    held = (stats or {}).get(HOLDS_ALL)
    return held if isinstance(held, str) else None


def why(job: Job, queue_reason: str | None, now: datetime) -> str | None:
    """Why ``job`` has not started: None unless it is scheduled. ``queue_reason`` is
    its queue's (``of_queue``).

    The jobs it runs after, or a closed window, come first (they are stored, and the
    job is not due); then a run_at still to come; then what holds its whole queue;
    then the reason its loop stored; and a due job with none of those is one the loop
    has not read yet (it reads up to ``batch_size`` due jobs a tick)."""
    if job.state is not State.SCHEDULED:
        return None
    stored = job.waiting_reason
    if job.waiting_for:
        return stored
    if job.run_at > now:
        if stored:
            return stored
        at = job.run_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if job.attempt:
            return f"retry {job.attempt + 1} not before {at}"
        # The intake moves a job's run_at to its windows' next opening.
        return f"outside its time windows: not before {at}" if job.windows else f"not before {at}"
    return queue_reason or stored or UNREAD


def explained(job: Job, queue_reason: str | None, now: datetime) -> Job:
    """``job`` with ``waiting_reason`` saying why it waits (``why``), as it is shown."""
    reason = why(job, queue_reason, now)
    return job if reason == job.waiting_reason else job._replace(waiting_reason=reason)
