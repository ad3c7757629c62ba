"""Requests that wait for a job to finish (``GET /v1/jobs/{id}?wait=30s``).

A waiter reads nothing of its own. Waiters register here, in the process; a check
reads the jobs of every new waiter and of every waiter whose job may have finished
(their state and queue first; in full, with attempts and heartbeat, only those
finished) and of every waiter whose wait ended or whose job this process saw finish
(in full at once: no statement for their state first), in one read transaction of
a few statements for up to ``CHECK_AT_MOST`` jobs, and hands each waiter what it
answers: a thousand waiters cost a few statements, not a thousand reads queued on the
connection pool. A waiter's end is a timer of the event loop, not a task of its own.
A check runs when:

- waiters arrived (their first read),
- a queue loop of this process settled a waited-for job (the core's ``job_settled``
  event),
- a ``settled:<queue>`` wake-up arrives (on PostgreSQL the jobs table's trigger sends
  it for every job that reaches a terminal state, in any process, also by an
  operator's verb): the waiters of that queue are checked,
- a waiter's wait ended (its job is answered as it is, whatever its state),
- every ``recheck_seconds`` while anyone waits: a net under what no event tells (on
  SQLite an operator's verb; on PostgreSQL a wake-up lost while the LISTEN
  connection reconnected).

Checks do not overlap: wake-ups that arrive during one are folded into the next, and
jobs beyond ``CHECK_AT_MOST`` wait for the next check, which comes at once. A waiter
already answered is not read again; with nobody waiting a check reads nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from hipq.activity import Loop
from hipq.lifecycle import TERMINAL
from hipq.store import JobView, Store

log = logging.getLogger("hipq.process.job_waiters")

# The longest wait a request may ask for; longer is refused (422).
MAX_WAIT_SECONDS = 60.0
RECHECK_SECONDS = 5.0
# The most jobs one check reads: a thousand waiters woken together get their answers
# a few hundred at a time, the first ones without waiting for the others' reads.
CHECK_AT_MOST = 200
_TERMINAL = frozenset(s.value for s in TERMINAL)


class JobWaiters(Loop):
    """A ``Loop``: the waiting requests of this process and their checks, every
    ``recheck_seconds`` and when ``wake`` is set (a waited-for job may have finished,
    or a wait ended)."""

    name = "job-waiters"

    def __init__(self, store: Store, recheck_seconds: float = RECHECK_SECONDS) -> None:
        super().__init__(log, "job waiters", recheck_seconds)
        self.store = store
        # A waiter's future gets what it answers, or None: read it yourself (the process
        # stops, or the job is gone).
        self._futures: dict[int, list[asyncio.Future[JobView | None]]] = defaultdict(list)
        self._queue_of: dict[int, str] = {}
        self._due: set[int] = set()  # job ids to read at the next check
        self._new: set[int] = set()  # job ids of new waiters: whether finished, which queue
        # Job ids whose ``job_settled`` event said finished: read in full at once.
        self._finished: set[int] = set()
        # Waiters whose wait ended: answered at the next check whatever their job's state.
        self._ended: list[tuple[int, asyncio.Future[JobView | None]]] = []
        self.checks = 0  # queries the checks ran (for the benchmark)
        self.check_at_most = CHECK_AT_MOST

    @property
    def recheck_seconds(self) -> float:
        return self.interval

    @recheck_seconds.setter
    def recheck_seconds(self, seconds: float) -> None:
        self.interval = seconds

    @property
    def waiting(self) -> int:
        return sum(len(f) for f in self._futures.values())

    async def wait(self, job_id: int, seconds: float) -> JobView:
        """The job (with its attempts and heartbeat) once it is finished, or as it is
        when ``seconds`` have passed; ``NotFound`` if there is no such job."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[JobView | None] = loop.create_future()
        # Registered before the first read: a job that finishes meanwhile wakes it.
        self._futures[job_id].append(future)
        timer: asyncio.TimerHandle | None = None
        try:
            if self.running and not self.stopping:
                # Its first read is the next check's, with the other new waiters'. Its
                # end is a timer of the loop's, not a task: a thousand waits that end
                # together cost a thousand callbacks and the next check, nothing more.
                self._new.add(job_id)
                self.wake.set()
                timer = loop.call_later(max(seconds, 0.0), self._end, job_id, future)
                answer = await future
            else:  # no check will come (loops driven by their caller, or a stop)
                view = await self.store.job_view(job_id)
                if view.job.state in TERMINAL or seconds <= 0:
                    return view
                self._queue_of[job_id] = view.job.queue
                try:
                    answer = await asyncio.wait_for(asyncio.shield(future), seconds)
                except TimeoutError:
                    answer = None
            return answer or await self.store.job_view(job_id)
        finally:
            if timer is not None:
                timer.cancel()
            waiting = self._futures.get(job_id)
            if waiting is not None:
                with contextlib.suppress(ValueError):
                    waiting.remove(future)
                if not waiting:
                    del self._futures[job_id]
                    self._queue_of.pop(job_id, None)
                    self._finished.discard(job_id)
            if not future.done():
                future.cancel()

    def _end(self, job_id: int, future: asyncio.Future[JobView | None]) -> None:
        """A wait ended: the next check answers it with its job as it is then (None:
        read it yourself, when no check will come)."""
        if future.done():
            return
        if not self.running or self.stopping:
            future.set_result(None)
            return
        self._ended.append((job_id, future))
        self.wake.set()

    # -- what wakes them ------------------------------------------------------------

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        """The core's events: a job of this process settled in a terminal state."""
        if name == "job_settled" and fields.get("state") in _TERMINAL:
            job_id = fields.get("job_id")
            if job_id in self._futures:
                self._due.add(job_id)
                self._finished.add(job_id)
                self.wake.set()

    def on_settled(self, queue: str) -> None:
        """A ``settled:<queue>`` wake-up: check the waiters of that queue, and those
        whose queue is not known yet (their first read is under way, and may have
        read their job just before it finished)."""
        due = [i for i in self._futures if self._queue_of.get(i, queue) == queue]
        if due:
            self._due.update(due)
            self.wake.set()

    def _pending(self, job_id: int) -> bool:
        """Someone still waits for this job (a waiter answered by the last check may
        not have left yet: its job is not read again)."""
        return any(not f.done() for f in self._futures.get(job_id, ()))

    # -- the checks -----------------------------------------------------------------

    async def run_once(self) -> int:
        """One check of the new waiters' jobs, the jobs due and the waits that ended
        (all waiters' jobs if none of these); how many waiters it answered."""
        ended = [(job_id, f) for job_id, f in self._ended if not f.done()]
        self._ended = []
        new, self._new = self._new, set()
        ended_ids = {job_id for job_id, _ in ended}
        due = self._due | new | ended_ids or set(self._futures)
        due = {i for i in due if i in ended_ids or self._pending(i)}
        self._due = set()
        if not due:
            return 0
        if len(due) > self.check_at_most:
            # The rest waits for the next check, at once: these answers leave while
            # it reads (the waits that ended first go first).
            first = dict.fromkeys([*(job_id for job_id, _ in ended), *sorted(due)])
            later = due.difference(list(first)[: self.check_at_most])
            self._ended = [e for e in ended if e[0] in later]
            ended = [e for e in ended if e[0] not in later]
            self._new |= new & later
            new -= later
            self._due |= later
            due -= later
            ended_ids -= later
            self.wake.set()
        self.checks += 1
        # A wait that ended needs its job in full whatever its state; a job this process
        # saw finish is read in full at once (if it changed again since, its full read
        # says so: not finished, it is not answered).
        finished = self._finished & due
        self._finished -= finished
        try:
            views, open_queues = await self.store.job_views(
                sorted(due), if_finished=due - ended_ids - finished
            )
        except BaseException:
            # Each reads its own, and answers that read's error.
            _read_alone(f for _, f in ended)
            _read_alone(f for job_id in new for f in self._futures.get(job_id, ()))
            raise
        answered = 0
        found = {v.job.id: v for v in views}
        for job_id in new - found.keys() - open_queues.keys():  # gone: each reads it (404)
            _read_alone(self._futures.get(job_id, ()))
        open_queues.update((v.job.id, v.job.queue) for v in views if v.job.state not in TERMINAL)
        for job_id, queue in open_queues.items():
            if job_id in self._futures:
                self._queue_of[job_id] = queue
        for view in views:
            if view.job.state in TERMINAL:
                for future in self._futures.get(view.job.id, ()):
                    if not future.done():
                        future.set_result(view)
                        answered += 1
        for job_id, future in ended:
            if not future.done():  # not finished: as it is now; gone: None, a 404
                future.set_result(found.get(job_id))
                answered += 1
        return answered

    def release_all(self) -> None:
        """Answer every waiter now, with None (each reads its job as it is): the
        process is stopping, and a request held for its whole wait would hold up the
        server's shutdown."""
        _read_alone(f for futures in self._futures.values() for f in futures)
        self._ended.clear()
        self._new.clear()
        self._finished.clear()

    async def stop(self) -> None:
        self.release_all()
        await super().stop()

    async def stopped(self) -> None:
        # Waits that ended while the last check ran, or after ``release_all``.
        self.release_all()


def _read_alone(futures: Iterable[asyncio.Future[JobView | None]]) -> None:
    """Answer these waiters None: each reads its job itself."""
    for future in futures:
        if not future.done():
            future.set_result(None)
