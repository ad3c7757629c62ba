"""Values as a person writes them: ``no`` rather than ``False``, ``24 h`` rather than
``86400.0 s``; and the reason a job waits, as the operator needs to read it.

Pure functions, registered as Jinja filters by ``hipq.dashboard.pages``.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hipq.durations import format_duration
from hipq.jobs import Job
from hipq.lifecycle import State

PAUSED_REASON = "queue paused"
# (unit, seconds): the largest unit that divides a duration exactly names it; a day
# is only used from two on ("24 h" reads better than "1 d" for a timeout).
_UNITS = (("d", 86_400.0), ("h", 3_600.0), ("min", 60.0), ("s", 1.0))


def yes_no(value: object) -> str:
    """``yes`` / ``no`` for a flag, ``—`` for a flag not known."""
    if value is None:
        return "—"
    return "yes" if value else "no"


def duration(seconds: float | None) -> str:
    """A length of time in the unit a person would pick: ``24 h``, ``5 min``, ``1.5 s``."""
    if seconds is None:
        return "—"
    for unit, size in _UNITS:
        if unit == "d" and seconds < 2 * size:
            continue
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    if seconds >= 60:
        minutes, rest = divmod(seconds, 60)
        return f"{int(minutes)} min {rest:.0f} s" if rest >= 0.5 else f"{int(minutes)} min"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds <= 0:
        return "0 s"
    # Below a second: milliseconds, as format_duration spells them, with a space.
    text = format_duration(round(seconds, 3)) if seconds >= 0.001 else "<1ms"
    return text.replace("ms", " ms")


def utc_input(value: datetime | None) -> str:
    """An instant as a ``datetime-local`` input takes it, in UTC (the form says so)."""
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def waiting(job: Job, paused_queues: frozenset[str]) -> str | None:
    """Why a job has not started: a paused queue first (the loop reads no job of a
    paused queue, so the reason its throttlers gave last is stale), then the reason
    the loop recorded."""
    if job.state == State.SCHEDULED and job.queue in paused_queues:
        return PAUSED_REASON
    return job.waiting_reason
