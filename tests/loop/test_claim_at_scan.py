"""A tick that only claims (a new job on an idle queue without throttlers or capacity):
on PostgreSQL the store claims in its due scan, one statement; on SQLite the tick claims
as any other. Both engines: what is claimed, with which deadline, and what the chain
still decides (windows, forbidden flags) in the same tick."""

from __future__ import annotations

from datetime import timedelta

from hipq.lifecycle import State
from tests.loop.test_loop import Factory, add, get, owned, recording, services, tick
from tests.support import FakeClock

__all__ = ["services"]  # the fixture, shared with test_loop


async def test_new_jobs_on_an_idle_queue_are_claimed_each_with_its_own_deadline(
    services: Factory,
) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    transport = recording(svc)
    await tick(loop)  # the queue is idle: its first tick stored its stats
    later = clock() + timedelta(minutes=5)
    short = await add(svc, timeout="30s")
    default = await add(svc)
    await add(svc, run_at=later)
    report = await tick(loop)
    assert (report.admitted, report.next_run_at) == (2, later)
    assert sorted(transport.open_ids) == [short.id, default.id]
    for job, seconds in ((short, 30), (default, 24 * 3600)):
        claimed = await get(svc, job)
        assert (claimed.state, claimed.attempt, claimed.claimed_at) == (
            State.RUNNING,
            1,
            clock(),
        )
        assert claimed.deadline == clock() + timedelta(seconds=seconds)
        assert loop.in_flight[job.id].deadline == claimed.deadline
    transport.succeed(short.id)
    await tick(loop)
    assert (await get(svc, short)).state == State.COMPLETED


async def test_jobs_with_windows_or_forbidden_flags_are_decided_in_the_same_tick(
    services: Factory,
) -> None:
    clock = FakeClock()  # Monday 12:00 UTC
    svc = await services(clock)
    loop = await owned(svc)
    transport = recording(svc)
    await svc.store.queue_set_forbidden_flags("default", ["partner-x"])
    await tick(loop)
    plain = await add(svc)
    flagged = await add(svc, flags=["partner-x"])
    allowed = await add(svc, flags=["partner-y"])
    # Open when it was added, closed by the tick.
    closed = await add(svc, windows=[{"start": "12:00:00", "end": "12:00:05", "tz": "UTC"}])
    clock.advance(10)
    report = await tick(loop)
    assert (report.admitted, report.held, report.deferred) == (2, 1, 1)
    assert sorted(transport.open_ids) == [plain.id, allowed.id]
    held = await get(svc, flagged)
    assert (held.state, held.waiting_reason) == (
        State.SCHEDULED,
        "flag partner-x is forbidden on queue default",
    )
    deferred = await get(svc, closed)
    assert (deferred.state, deferred.run_at) == (
        State.SCHEDULED,
        clock().replace(second=0) + timedelta(days=1),
    )
    # The flag is allowed again: the held job runs, and so does the next new one.
    await svc.store.queue_set_forbidden_flags("default", [])
    assert (await tick(loop)).admitted == 1
    assert (await get(svc, flagged)).state == State.RUNNING
    after = await add(svc)
    assert (await tick(loop)).admitted == 1
    assert (await get(svc, after)).state == State.RUNNING


async def test_an_owner_that_lost_its_lease_claims_no_new_job(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock, owner="a")
    stale = await owned(svc)
    recording(svc)
    await tick(stale)
    clock.advance(svc.settings.lease_ttl + 1)
    other = await services(clock, owner="b", start=False)
    successor = await owned(other)
    recording(other)
    job = await add(svc)
    report = await stale.run_once()
    assert report.admitted == 0
    assert stale.token is None
    assert (await get(svc, job)).state == State.SCHEDULED
    assert (await tick(successor)).admitted == 1
    claimed = await get(svc, job)
    assert (claimed.state, claimed.attempt) == (State.RUNNING, 1)


async def test_a_paused_queue_claims_nothing_from_an_idle_wake_up(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    recording(svc)
    await tick(loop)
    await svc.store.queue_set_paused("default", True)
    job = await add(svc)
    assert (await tick(loop)).admitted == 0
    assert (await get(svc, job)).state == State.SCHEDULED
    await svc.store.queue_set_paused("default", False)
    assert (await tick(loop)).admitted == 1
