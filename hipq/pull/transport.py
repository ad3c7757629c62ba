"""The ``pull`` transport: a claimed job is left for a worker to fetch.

The owner's tick claimed the job (its capacity is held until it settles); here it
is reported sent at once, so that it is ``awaiting`` its worker's report as an
external job awaits its response: a graceful stop or a hand-back of the queue does
not wait for it, and a new owner leaves it to its worker. Waiting fetches, in this
process and the others, are told that jobs of its type can be taken: one
announcement per type and batch of claims.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from hipq.jobs import Job
from hipq.transports.base import Reporter

log = logging.getLogger("hipq.pull")

Announce = Callable[[Sequence[str]], Awaitable[None]]


class PullTransport:
    def __init__(self, announce: Announce) -> None:
        self._announce = announce
        self._types: set[str] = set()
        self._flush: asyncio.Task[None] | None = None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        if self._flush is not None:
            await asyncio.gather(self._flush, return_exceptions=True)

    @property
    def ready(self) -> bool:
        return True  # workers connect to hipq, not hipq to them

    @property
    def busy(self) -> int:
        return 0  # nothing of a pull job runs in this process

    def dispatch(self, job: Job, reporter: Reporter) -> None:
        reporter.sent(job)
        self._types.add(job.type)
        if self._flush is None or self._flush.done():
            self._flush = asyncio.create_task(self._announce_claimed(), name="hipq-pull-announce")

    def abandon(self, job_id: int) -> None:
        return None  # its worker learns it when its report is refused (409)

    async def _announce_claimed(self) -> None:
        # Runs after the loop's dispatch of the whole batch: one NOTIFY for all of it.
        await asyncio.sleep(0)
        types, self._types = sorted(self._types), set()
        try:
            await self._announce(types)
        except Exception:  # the fetches' periodic look finds the jobs anyway
            log.warning("could not announce claimed jobs of %s", types, exc_info=True)
