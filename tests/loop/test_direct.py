"""A queue loop built directly on a store, without a Service: a recording transport
stands in for the job's work, and the test reports each outcome itself, tick by tick,
with a pinned clock and no sleeps."""

from __future__ import annotations

from typing import Any

from hipq.batch_loop.chain import build_stages
from hipq.batch_loop.loop import QueueLoop
from hipq.jobs import Job, NewJob
from hipq.lifecycle import State
from hipq.plugins import RetryStrategies
from hipq.store import Store
from tests.recording import RecordingTransport
from tests.support import FakeClock, make_settings

RETRY = {"strategy": "fixed", "delay": "10s", "max_attempts": 3}


def make_loop(
    store: Store, database_url: str, clock: FakeClock, **queue: Any
) -> tuple[QueueLoop, RecordingTransport]:
    settings = make_settings(database_url, queues={"default": queue})
    transport = RecordingTransport()
    loop = QueueLoop(
        "default",
        settings.queues["default"],
        store,
        owner="test",
        stages=build_stages("default", settings),
        transports={"ok": transport},
        retry=RetryStrategies(),
        clock=clock,
    )
    return loop, transport


async def add(store: Store, clock: FakeClock, **fields: Any) -> Job:
    new = NewJob(type="ok", queue="default", payload={}, run_at=clock(), retry=RETRY, **fields)
    [job] = (await store.job_insert_many([new], clock())).jobs
    return job


async def test_loop_admits_in_queue_order_up_to_its_capacity_and_settles_reports(
    store: Store, database_url: str
) -> None:
    clock = FakeClock()
    loop, transport = make_loop(store, database_url, clock, concurrency=2)
    jobs = [await add(store, clock, priority=p) for p in (100, 100, 100, 100)]
    assert await loop.acquire()

    report = await loop.run_once()
    assert report.admitted == 2
    assert [j.id for j in transport.dispatched] == [jobs[0].id, jobs[1].id]
    assert [(await store.job_get(j.id)).state for j in jobs] == [
        State.RUNNING,
        State.RUNNING,
        State.SCHEDULED,
        State.SCHEDULED,
    ]

    # Full: a tick without reports admits nothing more.
    assert (await loop.run_once()).admitted == 0
    assert len(transport.dispatched) == 2

    transport.succeed(jobs[0].id, {"done": 1})
    transport.fail(jobs[1].id, "peer said no", retryable=False)
    report = await loop.run_once()
    assert report.settled == 2 and report.admitted == 2
    assert (await store.job_get(jobs[0].id)).state == State.COMPLETED
    failed = await store.job_get(jobs[1].id)
    assert (failed.state, failed.last_error) == (State.FAILED, "not retryable: peer said no")
    assert [j.id for j in transport.dispatched] == [j.id for j in jobs]


async def test_a_sent_job_awaits_its_response_and_a_retried_one_comes_back_later(
    store: Store, database_url: str
) -> None:
    clock = FakeClock()
    loop, transport = make_loop(store, database_url, clock)
    first, second = await add(store, clock), await add(store, clock)
    assert await loop.acquire()
    assert (await loop.run_once()).admitted == 2

    transport.sent(first.id)
    transport.fail(second.id, "try again")
    await loop.run_once()
    assert (await store.job_get(first.id)).state == State.AWAITING
    retried = await store.job_get(second.id)
    assert (retried.state, retried.attempt) == (State.SCHEDULED, 1)

    clock.advance(10)  # the fixed strategy's delay
    assert (await loop.run_once()).admitted == 1
    assert [j.id for j in transport.dispatched] == [first.id, second.id, second.id]
    assert transport.dispatched[-1].attempt == 2


async def test_a_drain_asked_for_during_a_claiming_tick_still_runs_what_it_claimed(
    store: Store, database_url: str
) -> None:
    # A graceful stop that landed while a tick claimed jobs left them `running`,
    # undispatched: the next owner ran them again as if cut off.
    clock = FakeClock()
    loop, transport = make_loop(store, database_url, clock, concurrency=2)
    job = await add(store, clock)
    assert await loop.acquire()
    admit = loop.admission.admit
    seen_ticking: list[bool] = []

    async def admit_then_stop(*args: Any, **kwargs: Any) -> Any:
        seen_ticking.append(loop.ticking)
        loop.request_drain()  # SIGTERM arrives mid-tick
        return await admit(*args, **kwargs)

    loop.admission.admit = admit_then_stop  # type: ignore[method-assign]
    report = await loop.run_once()
    assert report.admitted == 1 and seen_ticking == [True] and not loop.ticking
    assert [j.id for j in transport.dispatched] == [job.id]
    # Draining: the next tick claims nothing more.
    await add(store, clock)
    assert (await loop.run_once()).admitted == 0
