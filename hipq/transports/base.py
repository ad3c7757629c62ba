"""The seam between the queue loop and the ways a job's request leaves hipq."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine, Mapping
from datetime import datetime
from typing import Any, Protocol

from hipq.jobs import Job
from hipq.outcomes import Failed, Outcome
from hipq.retry import AttemptError

log = logging.getLogger("hipq.transports")


class Reporter(Protocol):
    """What a transport tells the loop. Calls are cheap: they queue for the next tick."""

    def outcome(self, job: Job, outcome: Outcome) -> None: ...

    def sent(self, job: Job) -> None:
        """The request left; the job now waits for its correlated response."""

    def heartbeat(self, job: Job, deadline: datetime) -> None: ...

    def checkpoint(self, job: Job, payload: dict[str, Any]) -> None: ...


class Transport(Protocol):
    @property
    def ready(self) -> bool:
        """Able to send now, as far as it knows (a producer connected to its broker);
        ``/readyz`` reports it. A transport with nothing to connect to is always ready."""

    @property
    def busy(self) -> int:
        """Sends under way: jobs dispatched whose send has not been reported yet."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def dispatch(self, job: Job, reporter: Reporter) -> None:
        """Start sending ``job`` without blocking the loop; report through ``reporter``."""

    def abandon(self, job_id: int) -> None:
        """The loop settled the job (timeout, cancel): stop working on it if still busy."""


def dispatch(transports: Mapping[str, Transport], job: Job, reporter: Reporter) -> None:
    """Hand ``job`` to its type's transport; a type no transport sends fails the
    attempt (not retryable)."""
    transport = transports.get(job.type)
    if transport is None:
        error = AttemptError(f"unknown job type {job.type!r}", retryable=False)
        reporter.outcome(job, Failed(error))
        return
    transport.dispatch(job, reporter)


class JobTasks:
    """The running sends of a transport: one asyncio task per job id.

    A job dispatched again (after a takeover) replaces its older task, and a task
    that ends forgets itself only if it is still the job's current one.
    """

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, job_id: int, work: Coroutine[Any, Any, None]) -> None:
        previous = self._tasks.get(job_id)
        if previous is not None:
            previous.cancel()
        # The name given to the task as it is made: ``asyncio.create_task`` names it
        # afterwards, a Python-level call per job that cost 2 % of a drain's CPU.
        loop = asyncio.get_running_loop()
        task = loop.create_task(work, name=f"{self._prefix}-{job_id}")
        self._tasks[job_id] = task
        task.add_done_callback(lambda t: self._forget(job_id, t))

    def _forget(self, job_id: int, task: asyncio.Task[None]) -> None:
        if self._tasks.get(job_id) is task:
            del self._tasks[job_id]

    def cancel(self, job_id: int) -> None:
        task = self._tasks.pop(job_id, None)
        if task is not None:
            task.cancel()

    async def cancel_all(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()


async def report_send(
    kind: str, job: Job, reporter: Reporter, send: Awaitable[Outcome | None]
) -> None:
    """Await one send and report it: None means the request left (the job waits for its
    response), an outcome settles the attempt. A bug in the send fails the attempt
    rather than leave the job to its deadline."""
    try:
        outcome = await send
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("%s job %s: unexpected error", kind, job.id)
        error = AttemptError(f"unexpected error: {type(exc).__name__}: {exc}", kind=kind)
        outcome = Failed(error)
    if outcome is None:
        reporter.sent(job)
    else:
        reporter.outcome(job, outcome)
