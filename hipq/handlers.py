"""Built-in python handlers: useful to try hipq out, to smoke-test a deployment, and to
benchmark the loop without an external system."""

from __future__ import annotations

import asyncio
from typing import Any

from hipq.transports.python import JobContext, PermanentError


async def noop(job: JobContext) -> None:
    """Does nothing (the benchmarks measure hipq's own cost with it)."""
    return None


async def echo(job: JobContext) -> dict[str, Any]:
    """Returns the payload as the result."""
    return job.payload


async def sleep(job: JobContext) -> dict[str, Any]:
    """Sleeps ``payload.seconds`` (heartbeating every second); fails if ``payload.fail`` is set."""
    seconds = float(job.payload.get("seconds", 1))
    while seconds > 0:
        await asyncio.sleep(min(1.0, seconds))
        seconds -= 1.0
        job.heartbeat()
    if job.payload.get("fail"):
        if job.payload.get("permanent"):
            raise PermanentError(str(job.payload["fail"]))
        raise RuntimeError(str(job.payload["fail"]))
    return {"slept": job.payload.get("seconds", 1)}
