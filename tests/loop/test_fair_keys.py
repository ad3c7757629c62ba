"""Keys served fairly: a backlog of one label value at the front of the queue does not
hold the other values back, with ``per_key`` (each value read on its own) and with a
queue that takes the values in turn (``round_robin_label``). Both engines."""

from __future__ import annotations

from hipq.lifecycle import State
from tests.loop.test_loop import Factory, add, get, owned, recording, services
from tests.support import FakeClock

__all__ = ["services"]  # the fixture, shared with test_loop


async def test_per_key_a_held_tenant_s_backlog_does_not_hide_another_tenant(
    services: Factory,
) -> None:
    """limit 1, batch_size 5, 8 jobs of A then 2 of B: A's first and B's first run at
    once (the read of A's backlog alone would start one job and leave B unread)."""
    clock = FakeClock()
    per_key = {"key": "labels.tenant", "limit": 1}
    queue = {"concurrency": 10, "batch_size": 5, "throttlers": [{"per_key": per_key}]}
    svc = await services(clock, queues={"default": queue})
    transport = recording(svc)
    loop = await owned(svc)
    a = [await add(svc, type="gated", labels={"tenant": "A"}) for _ in range(8)]
    b = [await add(svc, type="gated", labels={"tenant": "B"}) for _ in range(2)]
    report = await loop.run_once()
    assert report.full
    assert {j.id for j in transport.dispatched} == {a[0].id, b[0].id}
    assert (await get(svc, b[1])).waiting_reason == "per_key tenant=B 1/1 in flight"
    assert (await get(svc, a[1])).waiting_reason == "per_key tenant=A 1/1 in flight"
    # Each tenant's next job follows as its previous one ends.
    transport.succeed(b[0].id)
    await loop.run_once()
    await loop.run_once()
    assert b[1].id in {j.id for j in transport.dispatched}


async def test_round_robin_takes_the_tenants_in_turn(services: Factory) -> None:
    """A backlog of A, then B's and C's jobs: with capacity 3, one of each runs, and
    as capacity frees the tenants keep taking turns, not A's backlog first."""
    clock = FakeClock()
    queue = {"concurrency": 3, "batch_size": 4, "round_robin_label": "tenant"}
    svc = await services(clock, queues={"default": queue})
    transport = recording(svc)
    loop = await owned(svc)
    a = [await add(svc, type="gated", labels={"tenant": "A"}) for _ in range(10)]
    clock.advance(1)
    b = [await add(svc, type="gated", labels={"tenant": "B"}) for _ in range(2)]
    c = await add(svc, type="gated", labels={"tenant": "C"})
    clock.advance(1)
    await loop.run_once()
    assert {j.id for j in transport.dispatched} == {a[0].id, b[0].id, c.id}
    reason = (await get(svc, a[1])).waiting_reason
    assert reason is not None and reason.startswith("round_robin tenant=A: waits its turn; ")
    # A's job ends: A has none in flight, B and C one each: A's turn.
    transport.succeed(a[0].id)
    await loop.run_once()
    await loop.run_once()
    assert transport.dispatched[-1].id == a[1].id
    # B's job ends: B's turn, ahead of A's older backlog.
    transport.succeed(b[0].id)
    await loop.run_once()
    await loop.run_once()
    assert transport.dispatched[-1].id == b[1].id


async def test_round_robin_a_large_backlog_delays_another_tenant_by_one_turn(
    services: Factory,
) -> None:
    """3,000 jobs of A due before B's one job, batch_size 100, capacity 2: B's job
    starts in the first tick, beside A's first (in queue order it would wait for all
    of A's)."""
    clock = FakeClock()
    queue = {"concurrency": 2, "batch_size": 100, "round_robin_label": "tenant"}
    svc = await services(clock, queues={"default": queue})
    transport = recording(svc)
    loop = await owned(svc)
    backlog = [
        svc.intake.resolve({"type": "gated", "labels": {"tenant": "A"}}, clock())
        for _ in range(3000)
    ]
    first_a = (await svc.store.job_insert_many(backlog, clock())).jobs[0]
    clock.advance(1)
    b = await add(svc, type="gated", labels={"tenant": "B"})
    await loop.run_once()
    assert {j.id for j in transport.dispatched} == {first_a.id, b.id}
    assert (await get(svc, b)).state == State.RUNNING
