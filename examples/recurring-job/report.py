"""The example's job: a python handler that builds a (pretend) report for its period."""

from __future__ import annotations

from typing import Any

from hipq.transports.python import JobContext


async def build_report(job: JobContext) -> dict[str, Any]:
    # The schedule rendered the fire time into the payload ({fire.local}).
    return {"report": f"orders up to {job.payload['period_end']}", "rows": 42}
