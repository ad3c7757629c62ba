"""The process's row in the registry of live processes, and its share of the queues.

Every ``lease_ttl / 3`` the process writes its heartbeat (which also forgets the
processes silent for ``lease_ttl``), computes the fair share of the queues
(``hipq.process.queue_share``) from what the beat read, and tells each of its queue
loops whether the queue is its to run: a loop takes the lease of a queue assigned to
it and hands back one that is not (``QueueLoop.assign``), and which live processes
serve it, to which its owner may hand claimed jobs to send (``QueueLoop.serve_with``).
At stop the row is deleted, after the loops released their leases and the executor
reported what it sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping
from datetime import datetime

from hipq.batch_loop.loop import QueueLoop
from hipq.faults import FaultReporter
from hipq.process.queue_share import assign, share_of
from hipq.stopping import finish_or_cancel
from hipq.store import Store
from hipq.store.processes import ProcessInfo

log = logging.getLogger("hipq.process.registry")


class ProcessRegistry:
    """An ``Activity``: the heartbeat and the share, ``run_once`` every ``lease_ttl / 3``."""

    name = "process-registry"

    def __init__(
        self,
        store: Store,
        loops: Mapping[str, QueueLoop],
        me: ProcessInfo,
        clock: Callable[[], datetime],
        lease_ttl: float,
        *,
        steers_loops: bool = True,
    ) -> None:
        self.store, self.loops, self.me, self.clock = store, loops, me, clock
        self.lease_ttl = lease_ttl
        # False where the loops are driven by their caller (``run_loops=False``: tests,
        # ``hipq.testing``): the process still beats, and the caller decides what runs.
        self.steers_loops = steers_loops
        self.share: set[str] = set(me.queues)
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._beat_now = asyncio.Event()

    @staticmethod
    def serves(configured: Collection[str], only: Collection[str] | None) -> tuple[str, ...]:
        """The queues a process may serve: its configuration's, narrowed by ``only``."""
        return tuple(sorted(q for q in configured if only is None or q in only))

    async def run_once(self) -> set[str]:
        """Beat, compute the share, tell the loops; this process's share."""
        registry = await self.store.process_beat(self.me, self.clock(), self.lease_ttl)
        serves = {p.id: p.queues for p in registry.processes}
        serves[self.me.id] = self.me.queues  # the row just written, whatever was read
        mine = share_of(self.me.id, assign(serves, registry.owners))
        if mine != self.share:
            log.info("share of the queues: %s", ", ".join(sorted(mine)) or "none")
        self.share = mine
        if self.steers_loops:
            live = list(serves)
            for name, loop in self.loops.items():
                loop.assign(name in mine)
                loop.serve_with([p for p, queues in serves.items() if name in queues], live)
        return mine

    def leave(self) -> None:
        """The process is stopping: from its next beat (at once) it may serve no queue,
        so that the others count it out of the shares now and take each of its queues
        as soon as its loop releases the lease, not a beat after this row is gone."""
        self.me = dataclasses.replace(self.me, queues=())
        self._beat_now.set()

    async def start(self) -> None:
        """The first beat before the loops start, so that they take only this share."""
        if self.steers_loops:
            for name, loop in self.loops.items():
                loop.assign(name in self.me.queues)
        with contextlib.suppress(Exception):  # the next beat tries again
            await self.run_once()
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name="hipq-process-registry")

    async def stop(self) -> None:
        if self._task is not None:
            self._stopping.set()
            self._beat_now.set()
            await finish_or_cancel([self._task])
            self._task = None
        with contextlib.suppress(Exception):  # else it expires after lease_ttl
            await self.store.process_remove(self.me.id)

    async def _run(self) -> None:
        faults = FaultReporter(log, "process registry")
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._beat_now.wait(), self.lease_ttl / 3)
            self._beat_now.clear()
            if self._stopping.is_set():
                return
            try:
                await self.run_once()
                faults.succeeded()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                faults.failed(exc)
