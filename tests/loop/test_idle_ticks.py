"""What a tick reads for the loop's sleep: the next due time, in the tick's own
transaction when it claimed nothing or also settled jobs, and after the dispatch when
it only claimed jobs (on PostgreSQL the due scan reads it along, at no cost)."""

from __future__ import annotations

from datetime import timedelta

from tests.loop.test_loop import Factory, add, owned, recording, services, tick
from tests.support import FakeClock

__all__ = ["services"]  # the fixture, shared with test_loop


async def test_a_tick_that_claims_nothing_reads_the_next_due_time(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    recording(svc)
    later = clock() + timedelta(minutes=5)
    await add(svc, run_at=later)
    report = await tick(loop)
    assert report.admitted == 0
    assert report.next_run_at == later
    assert await loop._next_run_at(report, clock()) == later


async def test_a_tick_that_claims_reads_the_next_due_time_with_its_due_scan(
    services: Factory,
) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    recording(svc)
    later = clock() + timedelta(minutes=5)
    await add(svc)
    await add(svc, run_at=later)
    report = await tick(loop)
    assert report.admitted == 1
    assert report.next_run_at == later  # read with the due scan
    assert await loop._next_run_at(report, clock()) == later


async def test_a_tick_that_settles_and_claims_reads_the_next_due_time(
    services: Factory,
) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    transport = recording(svc)
    later = clock() + timedelta(minutes=5)
    first = await add(svc)
    await tick(loop)
    transport.succeed(first.id)
    await add(svc)
    await add(svc, run_at=later)
    report = await tick(loop)
    assert (report.settled, report.admitted) == (1, 1)
    assert report.next_run_at == later


async def test_a_paused_queue_reads_the_next_due_time_too(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    await svc.store.queue_set_paused("default", True)
    await add(svc)
    report = await tick(loop)
    assert (report.admitted, report.next_run_at) == (0, None)  # due now: not "after now"
