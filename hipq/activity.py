"""The one shape of a background activity of a hipq process.

A queue loop, the upkeep, the Kafka response consumer, the PostgreSQL listener and
the webhook's response writer each run beside the API. Each is an ``Activity``: the
service starts them in order and stops them in reverse, and a test drives one step
at a time through ``run_once`` without starting anything.

Most of them are a ``Loop``: a body (``run_once``) stepped in a task of its own,
resting between steps until its interval passes or something sets its ``wake``
event, and stopped with a bounded grace. A subclass is its body alone; the few
that step differently (the queue loop) say so in ``turn`` and ``after_failure``.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from typing import Any, Protocol, runtime_checkable

from hipq.faults import FaultReporter
from hipq.stopping import GRACE_SECONDS, finish_or_cancel


@runtime_checkable
class Activity(Protocol):
    name: str

    async def start(self) -> None:
        """Begin working in the background; return once it runs."""

    async def stop(self) -> None:
        """Finish the step under way (or cancel it after a grace period) and end."""

    async def run_once(self) -> Any:
        """One step, in the caller's task; what it did, for tests and benchmarks."""


class Loop(abc.ABC):
    """An ``Activity`` that steps ``run_once`` in a task of its own until stopped.

    After each step it rests ``interval`` seconds, or less when ``wake`` is set (by
    new input, or by ``request_stop``). A step that raises is logged once per fault
    by a ``FaultReporter`` (a start line, counts, a recovery line), and the loop goes
    on after ``after_failure``'s rest. ``stop`` lets the step under way finish for up
    to ``grace`` seconds, then cancels it.
    """

    name: str

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        interval: float,
        *,
        run: bool = True,
        grace: float = GRACE_SECONDS,
    ) -> None:
        # ``run`` False: ``start`` starts no task (tests drive ``run_once`` themselves).
        self.log, self.what, self.interval, self.runs, self.grace = log, what, interval, run, grace
        self.wake = asyncio.Event()
        self.faults = FaultReporter(log, what)
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    # -- what a subclass is -----------------------------------------------------------

    @abc.abstractmethod
    async def run_once(self) -> Any:
        """One step, in the caller's task."""

    async def turn(self) -> float | None:
        """One step of the running loop and the seconds to rest after it; None: step
        again at once, without resting (more work is known to be waiting)."""
        await self.run_once()
        return self.interval

    async def after_failure(self, exc: Exception) -> float | None:
        """What to do after a step raised (already logged): the seconds to rest."""
        return self.interval

    async def starting(self) -> None:
        """Before the task starts (also when it does not run): open what steps use."""
        return None

    async def stopped(self) -> None:
        """After the task ended: close what steps used. Safe to repeat."""
        return None

    @property
    def task_name(self) -> str:
        return f"hipq-{self.name}"

    # -- the loop ---------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """Asked to stop: a long step looks at this between its parts."""
        return self._stopping

    @property
    def running(self) -> bool:
        """Its task steps (``start``), as opposed to a test driving ``run_once``."""
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        await self.starting()
        if not self.runs:
            return
        self._stopping = False
        self._task = asyncio.create_task(self.run(), name=self.task_name)

    def request_stop(self) -> None:
        """Ask the loop to end after the step under way."""
        self._stopping = True
        self.wake.set()

    async def stop(self) -> None:
        """End the loop: its step under way finishes, or is cancelled after ``grace``."""
        self.request_stop()
        task, self._task = self._task, None
        if task is not None:
            await finish_or_cancel([task], self.grace)
        await self.stopped()

    async def run(self) -> None:
        """Step until ``request_stop``, in the caller's task."""
        faults = self.faults
        while not self._stopping:
            try:
                rest = await self.turn()
                faults.succeeded()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                faults.failed(exc)  # one line when a fault starts, not one per step
                rest = await self.after_failure(exc)
            if rest is not None:
                await self.rest(rest)

    async def rest(self, seconds: float) -> None:
        """Until ``seconds`` have passed or ``wake`` is set; clears ``wake``."""
        if not self.wake.is_set():
            # A timer that sets the wake-up rather than ``wait_for``: that runs the wait
            # in a task of its own, and a wake-up then takes three turns of the event
            # loop to reach this one.
            timer = asyncio.get_running_loop().call_later(max(0.0, seconds), self.wake.set)
            try:
                await self.wake.wait()
            finally:
                timer.cancel()
        self.wake.clear()
