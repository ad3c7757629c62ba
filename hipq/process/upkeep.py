"""Upkeep: the small background chores of a hipq process, each safe to run anywhere.

- classify inbox responses that no open job will match (duplicate, late, expired),
- delete settled inbox rows and parked messages past their retention,
- forget idempotency keys past their TTL,
- delete finished jobs past their ``job_retention`` (off by default).
None of them changes an open job, so they never race the queue loops (which
never read a finished job again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from hipq.activity import Loop
from hipq.config import Settings
from hipq.events import Events
from hipq.lifecycle import State
from hipq.store import Store

log = logging.getLogger("hipq.process.upkeep")

# Finished jobs deleted per transaction, and per state in one pass of the sweep.
PRUNE_BATCH = 5_000
JOBS_PER_PASS = 200_000


class Upkeep(Loop):
    """A ``Loop``: ``run_once`` every ``interval`` seconds until stopped."""

    name = "upkeep"

    def __init__(
        self,
        settings: Settings,
        store: Store,
        clock: Callable[[], datetime],
        events: Events,
        interval: float = 2.0,
        prune_every: float = 3600.0,
    ) -> None:
        super().__init__(log, "upkeep", interval)
        self.settings, self.store, self.clock, self.events = settings, store, clock, events
        self.prune_every = prune_every
        self._last_prune: datetime | None = None

    async def run_once(self) -> dict[str, int]:
        now = self.clock()
        counts = await self.store.response_classify(now)
        for status, count in counts.items():
            if count:
                self.events.emit("responses_settled", status=status, count=count)
        if self._last_prune is None or (now - self._last_prune).total_seconds() >= self.prune_every:
            await self._prune(now)
            self._last_prune = now
        return counts

    async def _prune(self, now: datetime) -> None:
        cutoff = now - timedelta(seconds=self.settings.idempotency_ttl)
        await self.store.idempotency_prune(cutoff)
        await self.store.response_prune(now - timedelta(seconds=self.settings.responses.retention))
        await self.store.heartbeat_messages_prune(now - self._signed_replay_window())
        await self._prune_jobs(now)

    def _signed_replay_window(self) -> timedelta:
        """How long a signed heartbeat may still verify after it arrived: its timestamp
        may be a tolerance ahead, and verifies until a tolerance after (the longest)."""
        tolerances = [
            t.callback_signature.tolerance
            for t in self.settings.job_types.values()
            if t.callback_signature is not None
        ]
        return timedelta(seconds=2 * max(tolerances, default=0.0))

    async def _prune_jobs(self, now: datetime) -> None:
        """Finished jobs past their retention, a batch per transaction (short write
        locks), at most ``JOBS_PER_PASS`` per state and pass: the rest next pass."""
        kept = self.settings.job_retention
        for state, seconds in (
            (State.COMPLETED, kept.completed),
            (State.FAILED, kept.failed),
            (State.CANCELLED, kept.cancelled),
        ):
            if seconds is None:
                continue
            before, pruned = now - timedelta(seconds=seconds), 0
            while pruned < JOBS_PER_PASS and not self.stopping:
                deleted = await self.store.job_prune(state, before, PRUNE_BATCH)
                pruned += deleted
                if deleted < PRUNE_BATCH:
                    break
            if pruned:
                self.events.emit("jobs_pruned", state=state.value, count=pruned)
