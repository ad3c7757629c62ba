"""The production throttler chain (``GuardedChain.run``), run from synchronous tests,
so that the chain's semantics are tested on the code the loop runs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

from hipq.batch_loop.chain import ChainResult, GuardedChain
from hipq.jobs import Job
from hipq.throttling import RunningView, Stage


def run_chain(
    stages: Sequence[Stage],
    candidates: Sequence[Job],
    view: RunningView,
    now: datetime,
    time_limit: float = 5.0,
) -> ChainResult:
    """Apply ``stages`` in order, as a queue's loop does; only what every stage
    admits is admitted."""
    chain = GuardedChain(stages, time_limit)
    try:
        return asyncio.run(chain.run(candidates, view, now))
    finally:
        chain.close()
