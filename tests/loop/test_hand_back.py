"""A queue handed back to another process (its share moved): the loop claims nothing
more and releases the lease only once none of its jobs is running, so the next owner
sends nothing twice. Both engines."""

from __future__ import annotations

from hipq.lifecycle import State
from tests.loop.test_fair_keys import services
from tests.loop.test_loop import Factory, add, get, owned, recording
from tests.support import FakeClock

__all__ = ["services"]  # the fixture, shared with test_loop


async def test_a_handed_back_queue_is_released_once_its_running_jobs_ended(
    services: Factory,
) -> None:
    clock = FakeClock()
    svc = await services(clock, queues={"default": {"concurrency": 5}})
    transport = recording(svc)
    loop = await owned(svc)
    first = await add(svc, type="gated")
    await loop.run_once()
    assert [j.id for j in transport.dispatched] == [first.id]

    loop.assign(False)
    later = await add(svc, type="gated")
    await loop.run_once()
    assert not await loop.hand_back_if_done()  # the first job still runs here
    assert [j.id for j in transport.dispatched] == [first.id]  # nothing more claimed
    assert (await get(svc, later)).state == State.SCHEDULED
    assert (await svc.store.queue_counts("default", clock())).lease_owner == svc.owner

    transport.sent(first.id)  # its request left: awaiting needs no sender
    await loop.run_once()
    assert await loop.hand_back_if_done()
    assert loop.token is None
    assert (await svc.store.queue_counts("default", clock())).lease_owner is None
    assert (await get(svc, first)).state == State.AWAITING
