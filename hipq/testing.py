"""Testing an application's jobs: run what is due until the queues are idle, on a
clock the test moves.

A test builds the application's service with ``manual_service`` (its queues run only
when driven, on a ``FakeClock``), adds jobs, calls ``run_until_idle`` and asserts on
the jobs it reads back. Time moves only when the test moves the clock, so a retry
due in ten minutes runs after ``clock.advance(600)`` and another ``run_until_idle``,
without waiting. ::

    clock = FakeClock()
    async with manual_service("hipq.yaml", database_url=url, clock=clock) as service:
        job = await service.add_job("send_receipt", {"order_id": 17})
        await run_until_idle(service)
        assert (await service.get_job(job.id)).state is State.COMPLETED

It is the service ``hipq serve`` runs, driven tick by tick as hipq's own tests drive
it: the same handlers, throttlers, retry strategies and database (SQLite or
PostgreSQL). docs/howto-test-jobs.md has the worked example and a pytest fixture.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hipq.config import Settings
from hipq.service import Service, ServiceError

__all__ = ["FakeClock", "IdleReport", "NotIdle", "manual_service", "run_until_idle"]


class FakeClock:
    """A clock the test moves by hand: nothing in hipq reads the wall clock directly."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@dataclass(frozen=True, slots=True)
class IdleReport:
    """What one ``run_until_idle`` did, summed over its rounds."""

    rounds: int = 0
    admitted: int = 0  # attempts started
    settled: int = 0  # attempts whose outcome was recorded (completed, failed, retried…)
    scheduled: int = 0  # jobs the config's schedules made


class NotIdle(AssertionError):
    """The queues did not become idle: a handler still runs after ``timeout`` seconds,
    or jobs kept coming for ``max_rounds`` rounds."""


def manual_service(
    config: str | os.PathLike[str] | Settings | None = None,
    *,
    clock: Callable[[], datetime] | None = None,
    **settings: Any,
) -> Service:
    """The service of ``config`` (as ``Service.from_config``) whose queues, schedules
    and notifications run only when ``run_until_idle`` drives them, on ``clock``
    (a new ``FakeClock`` if none; ``service.clock`` is it). Start it with ``async with``."""
    return Service.from_config(config, clock=clock or FakeClock(), run_loops=False, **settings)


async def run_until_idle(
    service: Service,
    *,
    max_rounds: int = 1000,
    timeout: float = 30.0,  # noqa: ASYNC109 - a bound on the handlers' real time
) -> IdleReport:
    """Run every job that is due by the service's clock, and record its outcome, until
    a round finds nothing to do. A round runs the schedules, one tick of each queue
    (claim what is due, record what reported), then waits (real time, at most
    ``timeout`` seconds in all) for the handlers it started. Jobs not yet due (a retry
    in ten minutes, a ``run_at`` tomorrow) stay scheduled: move the clock and run again.
    A job sent to an external system stays awaiting its response.

    Raises ``NotIdle`` if a handler is still running at ``timeout`` or work keeps
    arriving for ``max_rounds`` rounds."""
    if service.run_loops:
        raise ServiceError(
            "run_until_idle drives a service whose loops do not run on their own: "
            "build it with hipq.testing.manual_service (or run_loops=False)"
        )
    if not service.started:
        raise ServiceError("run_until_idle: the service is not started (use 'async with')")
    deadline = time.monotonic() + timeout
    transports = list({id(t): t for t in service.transports.values()}.values())
    rounds = admitted = settled = scheduled = 0
    while rounds < max_rounds:
        rounds += 1
        progress = 0
        if service.scheduler is not None:
            made = sum(1 for r in await service.scheduler.run_once() if r.job is not None)
            scheduled += made
            progress += made
        for loop in service.loops.values():
            # A clock moved past the lease's expiry loses it; take it again.
            if loop.token is None and not await loop.acquire():
                raise ServiceError(f"queue {loop.name} is owned by another process")
            tick = await loop.run_once()
            admitted += tick.admitted
            settled += tick.settled
            progress += tick.admitted + tick.settled
        while sum(t.busy for t in transports):  # the handlers this round started
            if time.monotonic() > deadline:
                running = sorted(j for lp in service.loops.values() for j in lp.in_flight)
                raise NotIdle(f"handlers still running after {timeout:g}s: jobs {running}")
            await asyncio.sleep(0.005)
        if not progress and not any(lp.settling for lp in service.loops.values()):
            return IdleReport(rounds, admitted, settled, scheduled)
    raise NotIdle(f"still busy after {max_rounds} rounds: is a job retried without delay?")
