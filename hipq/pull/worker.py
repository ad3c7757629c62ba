"""A pull worker: fetches jobs of some pull types from hipq's API and runs them with a
python handler, on any machine that reaches the API (``hipq worker``).

The handler is the one python job types run (``hipq.transports.python``): the same
``JobContext`` (``heartbeat``, ``checkpoint``, ``snooze``), the same exceptions
(``PermanentError``, ``Snooze``) and the same traceback kept on a failed attempt; what
it reports is sent to the API with the job's attempt token; the outcomes of jobs that
end together travel in one request (``report_outcomes``, one at a time: those that end
while one is under way go in the next). ``concurrency`` counts the jobs' weights, as
a queue's does: a fetch asks for no more than the weight free. A job whose type has a
``heartbeat_timeout`` is heartbeated every third of it while its handler runs, so that
a worker that dies loses it within that time. A report refused as stale (the job timed
out, was cancelled or settled meanwhile) stops the handler and is logged.

``stop()`` (SIGTERM) fetches nothing more and lets the jobs it has finish and report;
``stop_now()`` (a second signal) cuts them off: they time out and are retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from typing import Any

from hipq.client import AsyncClient, Conflict, FetchedJob, HipqError, ReportResult
from hipq.client.errors import ApiError
from hipq.ingest.group_commit import GroupCommit
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.outcomes import Failed, Outcome, Snoozed, Succeeded
from hipq.transports.python import Handler, PythonTransport

log = logging.getLogger("hipq.worker")

# After a fetch that failed (hipq unreachable), the next one waits this long.
FETCH_RETRY_SECONDS = 1.0
# What the API keeps of a failure (longer is refused): the error's start, the
# traceback's end (where it failed).
_ERROR_MAX, _TRACEBACK_MAX = 10_000, 65_536


def utcnow() -> datetime:
    return datetime.now(UTC)


class WorkerStopped(Exception):
    """The API refused the worker's fetch for good (a bad type, a token without the
    scope): the message is one readable line."""


class _Outcomes(GroupCommit[dict[str, Any], ReportResult]):
    """Outcomes sent together: those that arrive while a request is under way share
    the next one."""

    name = "worker-reports"

    def __init__(self, client: AsyncClient) -> None:
        super().__init__()
        self._client = client

    async def write_group(self, items: list[dict[str, Any]]) -> list[ReportResult | Exception]:
        try:
            return list(await self._client.report_outcomes(items))
        except ApiError as exc:
            if exc.status != 422 or len(items) == 1:
                raise
        # One report the API refuses (a result it cannot store) must not lose the others.
        out: list[ReportResult | Exception] = []
        for item in items:
            try:
                out.extend(await self._client.report_outcomes([item]))
            except HipqError as alone:
                out.append(alone)
        return out


class Worker:
    def __init__(
        self,
        client: AsyncClient,
        types: Sequence[str],
        handler: Handler,
        *,
        concurrency: int = 10,
        wait: float = 30.0,
        name: str | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.client, self.types, self.name = client, list(types), name
        self.concurrency, self.wait, self.clock = concurrency, wait, clock
        self._transport = PythonTransport(dict.fromkeys(self.types, handler), clock)
        self._jobs: dict[int, _Running] = {}
        self._load = 0  # the weight of the jobs under way
        self._outcomes = _Outcomes(client)
        self._stopping = asyncio.Event()
        self._slot = asyncio.Event()  # a job ended: there may be room to fetch
        self._fetch: asyncio.Task[list[FetchedJob]] | None = None
        self.done = 0  # jobs whose outcome was reported (or refused as stale)

    @property
    def running(self) -> int:
        return len(self._jobs)

    def stop(self) -> None:
        """Fetch nothing more; the jobs under way finish and report."""
        self._stopping.set()
        if self._fetch is not None:
            self._fetch.cancel()

    async def stop_now(self) -> None:
        """Cut off the jobs under way: their deadlines pass and they are retried."""
        self.stop()
        await self._transport.stop()
        for running in list(self._jobs.values()):
            running.end()
        self._jobs.clear()
        self._load = 0
        self._slot.set()

    async def run(self) -> None:
        """Fetch and run jobs until ``stop()``, then wait for those under way."""
        while not self._stopping.is_set():
            free = self.concurrency - self._load
            # Busy: fetch once a quarter of the capacity is free, not a job at a time
            # (each fetch is a request and a write transaction).
            if free <= 0 or (self._jobs and free < max(1, self.concurrency // 4)):
                self._slot.clear()
                await _first(self._slot.wait(), self._stopping.wait())
                continue
            fetched = await self._fetched(free)
            for job in fetched:
                self._start(job)
        while self._jobs:
            self._slot.clear()
            await self._slot.wait()

    async def _fetched(self, count: int) -> list[FetchedJob]:
        call = self.client.fetch_jobs(
            self.types, count, wait=self.wait, worker=self.name, weight=count
        )
        self._fetch = asyncio.ensure_future(call)
        try:
            return await self._fetch
        except asyncio.CancelledError:
            if self._stopping.is_set():
                return []
            raise
        except ApiError as exc:
            if exc.status < 500 and exc.status not in (408, 429):
                raise WorkerStopped(exc.message) from None
            log.warning("fetch failed: %s", exc)
        except HipqError as exc:
            log.warning("fetch failed: %s", exc)
        finally:
            self._fetch = None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), FETCH_RETRY_SECONDS)
        return []

    def _start(self, fetched: FetchedJob) -> None:
        job = _job(fetched, self.clock())
        running = _Running(self, fetched, job)
        self._jobs[job.id] = running
        self._load += fetched.weight
        if fetched.heartbeat_timeout:
            running.keep_alive(fetched.heartbeat_timeout / 3)
        self._transport.dispatch(job, running)

    def _ended(self, job_id: int) -> None:
        running = self._jobs.pop(job_id, None)
        if running is not None:
            running.end()
            self._load -= running.fetched.weight
            self.done += 1
        self._slot.set()

    def _abandon(self, job_id: int) -> None:
        """The job's claim is over (a 409): stop its handler, and forget it."""
        self._transport.abandon(job_id)
        self._ended(job_id)


class _Running:
    """One fetched job under way: the ``Reporter`` its handler talks to, which sends
    each report to the API with the job's token."""

    def __init__(self, worker: Worker, fetched: FetchedJob, job: Job) -> None:
        self.worker, self.fetched, self.job = worker, fetched, job
        self._tasks: set[asyncio.Task[None]] = set()
        self._beats: asyncio.Task[None] | None = None

    def _send(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def end(self) -> None:
        if self._beats is not None:
            self._beats.cancel()

    # -- the Reporter protocol (hipq.transports.base) -----------------------------------

    def outcome(self, job: Job, outcome: Outcome) -> None:
        self._send(self._report(outcome))

    def sent(self, job: Job) -> None:
        return None  # a handler's job has no request that leaves

    def heartbeat(self, job: Job, deadline: datetime) -> None:
        seconds = max(0.001, (deadline - self.worker.clock()).total_seconds())
        self._send(self._call(self.worker.client.report_heartbeat, extend_by=seconds))

    def checkpoint(self, job: Job, payload: dict[str, Any]) -> None:
        self._send(self._call(self.worker.client.report_checkpoint, payload))

    # -- sending ------------------------------------------------------------------------

    def keep_alive(self, every: float) -> None:
        async def beat() -> None:
            while True:
                await asyncio.sleep(every)
                await self._call(self.worker.client.report_heartbeat)

        self._beats = asyncio.create_task(beat())

    async def _report(self, outcome: Outcome) -> None:
        job = self.fetched
        # Heartbeats and checkpoints sent before the outcome go first.
        await asyncio.gather(*(t for t in self._tasks if t is not asyncio.current_task()))
        self.end()  # no heartbeat after the outcome: the claim is over for this worker
        try:
            answer = await self.worker._outcomes.submit(_report_of(job, outcome, self.worker))
            if answer.status != "accepted":
                log.warning("job %s: report ignored: %s", job.id, answer.message)
        except HipqError as exc:
            # Its deadline passes and it is retried: at-least-once.
            log.error("job %s: report not delivered: %s", job.id, exc)
        finally:
            self.worker._ended(job.id)

    async def _call(
        self, method: Callable[..., Coroutine[Any, Any, Any]], *args: Any, **kw: Any
    ) -> None:
        job = self.fetched
        try:
            await method(job.id, job.token, *args, **kw)
        except Conflict as exc:
            log.warning("job %s: its claim is over, handler stopped: %s", job.id, exc.message)
            self.worker._abandon(job.id)
        except HipqError as exc:
            log.warning("job %s: heartbeat not delivered: %s", job.id, exc)


def _report_of(fetched: FetchedJob, outcome: Outcome, worker: Worker) -> dict[str, Any]:
    """The report of ``outcome`` for ``report_outcomes``."""
    report: dict[str, Any] = {"id": fetched.id, "token": fetched.token}
    if isinstance(outcome, Succeeded):
        return {**report, "outcome": "completed", "result": outcome.result}
    if isinstance(outcome, Snoozed):
        seconds = max(0.0, (outcome.run_at - worker.clock()).total_seconds())
        return {**report, "outcome": "snoozed", "seconds": seconds, "reason": outcome.reason}
    assert isinstance(outcome, Failed)
    error = outcome.error
    return {
        **report,
        "outcome": "failed",
        "error": error.message[:_ERROR_MAX] or "failed",
        "retryable": error.retryable,
        "traceback": None if outcome.traceback is None else outcome.traceback[-_TRACEBACK_MAX:],
    }


def _job(fetched: FetchedJob, now: datetime) -> Job:
    """The job as a handler's ``JobContext`` reads it."""
    return Job(
        id=fetched.id,
        type=fetched.type,
        queue=fetched.queue,
        state=State.RUNNING,
        payload=dict(fetched.payload),
        run_at=now,
        priority=fetched.priority,
        weight=fetched.weight,
        labels=dict(fetched.labels),
        windows=None,
        timeout_seconds=fetched.timeout,
        retry={},
        attempt=fetched.attempt,
        created_at=now,
        updated_at=now,
        critical=fetched.critical,
        deadline=fetched.deadline,
    )


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
