"""The runner of operators' bulk operations (``hipq.store.bulk``): an ``Activity`` that
carries every operation under way forward one bounded step (one short transaction) at
a time until it is done, in whichever process runs it; a crash loses at most a step's
uncommitted work, which the next step does again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from hipq.activity import Loop
from hipq.store import Store

log = logging.getLogger("hipq.process.bulk_runner")

# A step's jobs: small enough that its transaction holds its row locks for
# milliseconds, large enough that a million jobs take a few hundred steps.
DEFAULT_STEP_SIZE = 1000
# Running operations of other processes are looked for this often when idle.
IDLE_INTERVAL_SECONDS = 2.0
# An operation whose steps fail this many times in a row ends as failed.
MAX_STEP_FAILURES = 5


class BulkRunner(Loop):
    """A ``Loop``: steps at once while operations are under way, else every
    ``interval`` seconds or when ``wake`` is set (an operation was started here)."""

    name = "bulk"

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        step_size: int = DEFAULT_STEP_SIZE,
        interval: float = IDLE_INTERVAL_SECONDS,
        run: bool = True,
    ) -> None:
        # ``run`` False: started, it does nothing by itself (tests drive ``run_once``),
        # as the queue loops of a service started without them.
        super().__init__(log, "bulk operations", interval, run=run)
        self.store, self.clock, self.step_size = store, clock, step_size
        self._failures: dict[int, int] = {}

    async def run_once(self) -> int:
        """One step of every operation under way; how many are still under way."""
        under_way = 0
        for op_id in await self.store.bulk_running():
            try:
                op = await self.store.bulk_step(op_id, self.step_size, self.clock())
            except Exception as exc:
                failures = self._failures.get(op_id, 0) + 1
                self._failures[op_id] = failures
                log.warning("bulk operation %s: step failed (%s)", op_id, exc)
                if failures >= MAX_STEP_FAILURES:
                    await self.store.bulk_fail(op_id, f"a step failed: {exc}", self.clock())
                    self._failures.pop(op_id, None)
                continue
            self._failures.pop(op_id, None)
            under_way += op.state == "running"
        return under_way

    async def turn(self) -> float | None:
        # Operations under way: their next steps at once, letting others run between.
        return 0.0 if await self.run_once() else self.interval
