"""python handlers that the tests' job types name (tests.handlers:<name>)."""

from __future__ import annotations

import asyncio
from typing import Any

from hipq.transports.python import JobContext, PermanentError

# What `record` saw, in order: (job id, attempt, payload).
SEEN: list[tuple[int, int, dict[str, Any]]] = []
RUNNING: set[int] = set()


async def ok(job: JobContext) -> dict[str, Any]:
    return {"echo": job.payload}


async def fail(job: JobContext) -> None:
    raise RuntimeError(f"failing on attempt {job.attempt}")


async def permanent(job: JobContext) -> None:
    raise PermanentError("will never work")


async def hang(job: JobContext) -> None:
    RUNNING.add(job.id)
    try:
        await asyncio.sleep(3600)
    finally:
        RUNNING.discard(job.id)


async def record(job: JobContext) -> dict[str, Any]:
    SEEN.append((job.id, job.attempt, dict(job.payload)))
    if job.payload.get("fail_until", 0) >= job.attempt:
        raise RuntimeError(f"attempt {job.attempt} fails")
    return {"attempt": job.attempt}


async def checkpointing(job: JobContext) -> dict[str, Any]:
    step = job.payload.get("step", 0) + 1
    job.checkpoint({**job.payload, "step": step})
    if step < 3:
        raise RuntimeError(f"stopped after step {step}")
    return {"finished_at_step": step}
