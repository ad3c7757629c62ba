"""Upkeep: the small background chores of a hipq process, each safe to run anywhere.

- classify inbox responses that no open job will match (duplicate, late, expired),
- delete settled inbox rows and parked messages past their retention,
- forget idempotency keys past their TTL.
None of them changes a job, so they never race the queue loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import delete

from hipq.config import Settings
from hipq.events import Events
from hipq.stopping import finish_or_cancel
from hipq.store import Store
from hipq.store.schema import idempotency_keys

log = logging.getLogger("hipq.upkeep")


class Upkeep:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        clock: Callable[[], datetime],
        events: Events,
        interval: float = 2.0,
        prune_every: float = 3600.0,
    ) -> None:
        self.settings, self.store, self.clock, self.events = settings, store, clock, events
        self.interval, self.prune_every = interval, prune_every
        self._last_prune: datetime | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

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
        async with self.store._write() as conn:
            await conn.execute(
                delete(idempotency_keys).where(idempotency_keys.c.created_at < cutoff)
            )
        await self.store.response_prune(now - timedelta(seconds=self.settings.responses.retention))

    def start(self) -> None:
        self._stopping.clear()
        self._task = asyncio.create_task(self._run(), name="hipq-upkeep")

    async def stop(self) -> None:
        if self._task is not None:
            self._stopping.set()
            await finish_or_cancel([self._task])
            self._task = None

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("upkeep failed; retrying at the next interval")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.interval)
