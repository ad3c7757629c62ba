"""The handler of the graceful-shutdown example (imported by `hipq serve`)."""

from __future__ import annotations

import asyncio
from typing import Any

from hipq.transports.python import JobContext


async def slow(job: JobContext) -> dict[str, Any]:
    await asyncio.sleep(job.payload.get("seconds", 2))
    return {"slept": job.payload.get("seconds", 2)}
