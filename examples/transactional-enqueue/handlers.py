"""The example's python handler: what a job of type ``send_receipt`` does."""

from __future__ import annotations

from typing import Any

from hipq.transports.python import JobContext


async def send_receipt(job: JobContext) -> dict[str, Any]:
    return {"sent": f"receipt for order {job.payload['order_id']}"}
