"""Requests that wait for a job to finish (``GET /v1/jobs/{id}?wait=30s``).

A waiter costs one read when it starts and, usually, one when it is woken; many
waiters cost no query each per second. Waiters register here, in the process; a
check reads every job that may have finished in ONE query and hands each waiter its
job. A check runs when:

- a queue loop of this process settled a waited-for job (the core's ``job_settled``
  event),
- a ``settled:<queue>`` wake-up arrives (on PostgreSQL the jobs table's trigger sends
  it for every job that reaches a terminal state, in any process, also by an
  operator's verb): the waiters of that queue are checked,
- every ``recheck_seconds`` while anyone waits: a net under what no event tells (on
  SQLite an operator's verb; on PostgreSQL a wake-up lost while the LISTEN
  connection reconnected).

Checks do not overlap: wake-ups that arrive during one are folded into the next. With
nobody waiting a check reads nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from typing import Any

from hipq.jobs import Job
from hipq.lifecycle import TERMINAL
from hipq.process.activity import Loop
from hipq.store import Store

log = logging.getLogger("hipq.process.job_waiters")

# The longest wait a request may ask for; longer is refused (422).
MAX_WAIT_SECONDS = 60.0
RECHECK_SECONDS = 5.0
_TERMINAL = frozenset(s.value for s in TERMINAL)


class JobWaiters(Loop):
    """A ``Loop``: the waiting requests of this process and their checks, every
    ``recheck_seconds`` and when ``wake`` is set (a waited-for job may have finished)."""

    name = "job-waiters"

    def __init__(self, store: Store, recheck_seconds: float = RECHECK_SECONDS) -> None:
        super().__init__(log, "job waiters", recheck_seconds)
        self.store = store
        # A waiter's future gets its finished job, or None: answer now (the process stops).
        self._futures: dict[int, list[asyncio.Future[Job | None]]] = defaultdict(list)
        self._queue_of: dict[int, str] = {}
        self._due: set[int] = set()  # job ids to read at the next check
        self.checks = 0  # queries the checks ran (for the benchmark)

    @property
    def recheck_seconds(self) -> float:
        return self.interval

    @recheck_seconds.setter
    def recheck_seconds(self, seconds: float) -> None:
        self.interval = seconds

    @property
    def waiting(self) -> int:
        return sum(len(f) for f in self._futures.values())

    async def wait(self, job_id: int, seconds: float) -> Job:
        """The job once it is finished, or as it is when ``seconds`` have passed."""
        future: asyncio.Future[Job | None] = asyncio.get_running_loop().create_future()
        # Registered before the first read: a job that finishes meanwhile wakes it.
        self._futures[job_id].append(future)
        try:
            job = await self.store.job_get(job_id)
            if job.state in TERMINAL or seconds <= 0:
                return job
            self._queue_of[job_id] = job.queue
            try:
                finished = await asyncio.wait_for(asyncio.shield(future), seconds)
            except TimeoutError:
                finished = None
            return finished or await self.store.job_get(job_id)
        finally:
            waiting = self._futures.get(job_id)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.remove(future)
                if not waiting:
                    del self._futures[job_id]
                    self._queue_of.pop(job_id, None)
            if not future.done():
                future.cancel()

    # -- what wakes them ------------------------------------------------------------

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        """The core's events: a job of this process settled in a terminal state."""
        if name == "job_settled" and fields.get("state") in _TERMINAL:
            job_id = fields.get("job_id")
            if job_id in self._futures:
                self._due.add(job_id)
                self.wake.set()

    def on_settled(self, queue: str) -> None:
        """A ``settled:<queue>`` wake-up: check the waiters of that queue."""
        due = [i for i, q in self._queue_of.items() if q == queue]
        if due:
            self._due.update(due)
            self.wake.set()

    # -- the checks -----------------------------------------------------------------

    async def run_once(self) -> int:
        """One check of the jobs due (all waiters' if none is due); how many finished."""
        due = self._due or set(self._futures)
        self._due = set()
        if not due:
            return 0
        self.checks += 1
        finished = await self.store.job_finished_among(sorted(due))
        for job in finished:
            for future in self._futures.get(job.id, ()):
                if not future.done():
                    future.set_result(job)
        return len(finished)

    def release_all(self) -> None:
        """Answer every waiter now, with its job as it is: the process is stopping, and
        a request held for its whole wait would hold up the server's shutdown."""
        for futures in self._futures.values():
            for future in futures:
                if not future.done():
                    future.set_result(None)

    async def stop(self) -> None:
        self.release_all()
        await super().stop()
