"""A python handler that measures, from the outside, what the throttlers let run at once."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from hipq.transports.python import JobContext

IN_FLIGHT: Counter[str] = Counter()  # weight running now, per "label=value" and "*"
PEAK: Counter[str] = Counter()
STARTED: list[int] = []


def reset() -> None:
    IN_FLIGHT.clear()
    PEAK.clear()
    STARTED.clear()


async def probe(job: JobContext) -> None:
    keys = ["*", *(f"{k}={v}" for k, v in job.labels.items())]
    for key in keys:
        IN_FLIGHT[key] += job.weight
        PEAK[key] = max(PEAK[key], IN_FLIGHT[key])
    STARTED.append(job.id)
    try:
        await asyncio.sleep(random.uniform(0.001, 0.01))
    finally:
        for key in keys:
            IN_FLIGHT[key] -= job.weight
