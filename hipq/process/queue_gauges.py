"""The per-queue gauges of /metrics: each process counts the jobs of the queues it
owns now, every ``metrics_interval``, in one grouped read.

Counted here and not at a scrape: a scrape costs no query, whatever the scrape rate
or the number of scrapers. Only owned queues: with N processes each queue is counted
by its one owner, so ``sum by (queue)`` over the processes is the queue's figure (a
queue handed over between two reads may be missing, or counted twice, for one interval).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime

from hipq.activity import Loop
from hipq.batch_loop.loop import QueueLoop
from hipq.events import Events
from hipq.store import Store
from hipq.store.records import QueueGauges

log = logging.getLogger("hipq.process.queue_gauges")


class QueueGaugeReader(Loop):
    """A ``Loop``: ``run_once`` every ``interval`` seconds; emits ``queue_gauges``."""

    name = "queue-gauges"

    def __init__(
        self,
        store: Store,
        loops: Mapping[str, QueueLoop],
        clock: Callable[[], datetime],
        events: Events,
        interval: float,
        *,
        run: bool = True,
    ) -> None:
        super().__init__(log, "queue gauges", interval, run=run)
        self.store, self.loops, self.clock, self.events = store, loops, clock, events

    async def run_once(self) -> dict[str, QueueGauges]:
        owned = sorted(name for name, loop in self.loops.items() if loop.token is not None)
        counts = await self.store.queue_gauges(owned, self.clock())
        self.events.emit("queue_gauges", queues=counts)
        return counts
