"""python handlers of the verbs tests (tests.verbs.handlers:<name>)."""

from __future__ import annotations

from typing import Any

from hipq.transports.python import JobContext


async def snoozer(job: JobContext) -> dict[str, Any]:
    """Snoozes ``times`` times (30 s each), then succeeds with what it saw."""
    done = job.payload.get("snoozed", 0)
    if done < job.payload.get("times", 0):
        job.checkpoint({**job.payload, "snoozed": done + 1})
        job.snooze(30, "not yet")
    return {"attempt": job.attempt, "snoozed": done}
