"""Values as a person writes them: ``no`` rather than ``False``, ``24 h`` rather than
``86400.0 s``; a job's run time and the duration of its attempt.

Pure functions, registered as Jinja filters by ``hipq.dashboard.pages``.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hipq.batches import waited_batch
from hipq.durations import format_duration
from hipq.jobs import Job
from hipq.lifecycle import State

# (unit, seconds): the largest unit that divides a duration exactly names it; a day
# is only used from two on ("24 h" reads better than "1 d" for a timeout).
_UNITS = (("d", 86_400.0), ("h", 3_600.0), ("min", 60.0), ("s", 1.0))


def visible(text: str) -> str:
    """``text`` with its invisible format characters (direction marks, zero widths:
    Unicode Cf) and control characters written as ``\\u202e``: a name made before
    such names were refused would otherwise read backwards, or as another's."""
    return "".join(
        f"\\u{ord(c):04x}" if unicodedata.category(c) in ("Cc", "Cf") else c for c in text
    )


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


def in_zone(value: datetime, zone: str) -> str:
    """An instant on the wall clock of an IANA zone, named by its abbreviation
    (``2027-01-01 03:00:00 CET``); a zone not known gives it in UTC."""
    try:
        local = value.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        local = value.astimezone(UTC)
    return local.strftime("%Y-%m-%d %H:%M:%S %Z")


def run_time(job: Job) -> str:
    """When a job may run: for one that waits for other jobs, what it waits for (its
    stored run_at is parked far in the future then), else its run_at."""
    if job.state is State.SCHEDULED and job.waiting_for:
        if job.after:
            shown = ", ".join(f"#{i}" for i in job.after[:3])
            return f"after {shown}" + (", ..." if len(job.after) > 3 else "")
        batch = waited_batch(job.waiting_reason)
        return f"after batch {batch}" if batch is not None else "after other jobs"
    return job.own_run_at.strftime("%Y-%m-%d %H:%M:%S UTC")


def job_duration(job: Job, now: datetime) -> float | None:
    """How long its last attempt ran (so far, for one in flight); None before one."""
    if job.claimed_at is None:
        return None
    if job.state in (State.RUNNING, State.AWAITING):
        return max(0.0, (now - job.claimed_at).total_seconds())
    if job.finished_at is not None and job.finished_at >= job.claimed_at:
        return (job.finished_at - job.claimed_at).total_seconds()
    return None
