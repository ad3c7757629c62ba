"""Forbidden flags (graphile-worker): a job may carry flags, and an operator forbids
flags on a queue at run time (a rate-limited partner, a maintenance window). The
queue's loop holds each due job that carries a forbidden flag, with that reason, as a
throttler holds one; the setting lives in the queue's row, so it holds in every
process and across restarts."""

from __future__ import annotations

from collections.abc import Iterable

from hipq.jobs import Job

STAGE = "forbidden_flags"  # the name its holds are counted under (held_by)


def split(candidates: Iterable[Job], forbidden: frozenset[str]) -> tuple[list[Job], dict[int, str]]:
    """The candidates that may go on to the throttlers, and the held ones' reasons."""
    allowed: list[Job] = []
    held: dict[int, str] = {}
    for job in candidates:
        hit = sorted(forbidden.intersection(job.flags)) if forbidden and job.flags else ()
        if hit:
            held[job.id] = f"flag {', '.join(hit)} is forbidden on queue {job.queue}"
        else:
            allowed.append(job)
    return allowed, held
