"""The example's python handler: what a job of type ``greet`` does."""

from __future__ import annotations

from typing import Any

from hipq.transports.python import JobContext


async def greet(job: JobContext) -> dict[str, Any]:
    """The returned value is stored as the job's result."""
    return {"greeting": f"hello, {job.payload.get('name', 'world')}"}
