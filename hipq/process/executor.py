"""This process's executor: it sends the jobs that queues' owners handed to it
(``hipq.batch_loop.hand_off``) and reports what its transports say back through the
database, for each owner to settle at its tick.

A step stores the reports gathered since the last one (one insert, which NOTIFYs
the owners of their queues) and, when woken by an ``exec:`` NOTIFY or its poll,
reads the jobs handed to it that are still ``running`` and dispatches the new ones
to this process's transports, as a queue's loop dispatches its own. A job that
stopped running here (the owner settled it: a cancel, a timeout) is abandoned.

Stopping (SIGTERM) it takes nothing new; the service's drain waits for its sends,
and the last step stores their reports before this process's row is deleted, so
no owner sends them again. A process killed mid-send leaves its jobs ``running``:
once its heartbeat expires their owner sends them again (at-least-once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from hipq.activity import Loop
from hipq.batch_loop import outcome_wire
from hipq.jobs import Job
from hipq.outcomes import Outcome
from hipq.store import Store
from hipq.store.hand_off import Report
from hipq.transports.base import Transport, dispatch

log = logging.getLogger("hipq.process.executor")


class Executor(Loop):
    """An ``Activity`` (a ``Loop``) and the ``Reporter`` of the jobs it sends."""

    name = "executor"

    def __init__(
        self,
        store: Store,
        me: str,
        transports: Mapping[str, Transport],
        clock: Callable[[], datetime],
        interval: float,
        *,
        run: bool = True,
    ) -> None:
        super().__init__(log, "executor", interval, run=run)
        self.store, self.me, self.transports, self.clock = store, me, transports, clock
        # The attempts taken (dispatched here) that are still running: (id, attempt) -> type.
        self._taken: dict[tuple[int, int], str] = {}
        self._reports: list[Report] = []
        self._look = True  # read what was handed: woken by a NOTIFY, or the poll
        self._looked = time.monotonic()
        self._draining = False
        self.sent_count = 0  # jobs dispatched here, for benchmarks and tests

    # -- what the process tells it ----------------------------------------------------

    def handed_to(self, process: str) -> None:
        """An ``exec:`` wake-up: a queue's owner handed jobs to ``process``."""
        if process == self.me:
            self._look = True
            self.wake.set()

    def request_drain(self) -> None:
        """The process is stopping: take nothing new; report what is under way."""
        self._draining = True
        self.wake.set()

    @property
    def settling(self) -> bool:
        """Reports not stored yet."""
        return bool(self._reports)

    # -- the Reporter its transports call -----------------------------------------------

    def outcome(self, job: Job, outcome: Outcome) -> None:
        self._report(job, "outcome", body=outcome_wire.encode(outcome))
        self.wake.set()

    def sent(self, job: Job) -> None:
        self._report(job, "sent")
        self.wake.set()

    def heartbeat(self, job: Job, deadline: datetime) -> None:
        self._report(job, "heartbeat", deadline=deadline)

    def checkpoint(self, job: Job, payload: dict[str, Any]) -> None:
        self._report(job, "checkpoint", body=payload)

    def _report(self, job: Job, kind: str, **fields: Any) -> None:
        self._reports.append(Report(job.queue, job.id, job.attempt, kind, **fields))

    # -- one step ---------------------------------------------------------------------

    async def run_once(self) -> int:
        """Store the reports, then dispatch what was newly handed; how many jobs."""
        await self._store_reports()
        if time.monotonic() - self._looked >= self.interval:
            self._look = True  # the poll: a NOTIFY may have been lost
        if self._draining or not self._look:
            return 0
        self._look, self._looked = False, time.monotonic()
        try:
            handed = await self.store.job_handed(self.me)
        except Exception:
            self._look = True
            raise
        running = {(j.id, j.attempt): j for j in handed}
        for key in self._taken.keys() - running.keys():
            # Settled by its owner meanwhile: stop working on it if still busy.
            transport = self.transports.get(self._taken.pop(key))
            if transport is not None:
                transport.abandon(key[0])
        new = [j for key, j in running.items() if key not in self._taken]
        for job in new:
            self._taken[(job.id, job.attempt)] = job.type
            dispatch(self.transports, job, self)
        self.sent_count += len(new)
        return len(new)

    async def turn(self) -> float | None:
        await self.run_once()
        return self.interval

    async def _store_reports(self) -> None:
        reports, self._reports = self._reports, []
        try:
            await self.store.report_add(reports)
        except Exception:
            self._reports = reports + self._reports
            raise

    async def stopped(self) -> None:
        """The last reports, after the drain: their owners must not send them again."""
        try:
            await self._store_reports()
        except Exception as exc:  # their jobs run again after this process's row expires
            log.warning("executor: %d reports not stored at stop: %s", len(self._reports), exc)
