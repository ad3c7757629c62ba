"""The queue loop, tick by tick, on SQLite and PostgreSQL, with a pinned clock.

Python handlers run as asyncio tasks: a short ``asyncio.sleep`` after a tick lets the
ones it dispatched report, and the next tick persists what they reported.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipq.batch_loop.loop import QueueLoop, TickReport
from hipq.jobs import Job, NewJob
from hipq.lifecycle import State
from hipq.service import Service
from hipq.transports.python import JobContext, PermanentError
from tests import handlers
from tests.recording import RecordingTransport
from tests.support import FakeClock, make_settings

HERE = "tests.loop.test_loop"

# -- handlers that the job types below name ----------------------------------------------

GATES: dict[int, asyncio.Event] = {}
STARTED: list[int] = []  # job ids, once per dispatch


def gate(job_id: int) -> asyncio.Event:
    return GATES.setdefault(job_id, asyncio.Event())


async def gated(job: JobContext) -> dict[str, Any]:
    """Runs until the test opens the job's gate."""
    STARTED.append(job.id)
    await gate(job.id).wait()
    return {"id": job.id}


async def beat_once(job: JobContext) -> None:
    """Heartbeats once, then works (hangs) until cancelled."""
    job.heartbeat(job.payload["extend"])
    await asyncio.sleep(3600)


async def scripted(job: JobContext) -> dict[str, Any]:
    """payload.script[attempt - 1] (or its last item) says how this attempt ends."""
    script = job.payload["script"]
    step = script[min(job.attempt, len(script)) - 1]
    if step == "fail":
        raise RuntimeError(f"scripted failure on attempt {job.attempt}")
    if step == "permanent":
        raise PermanentError("scripted permanent failure")
    if step == "hang":
        await asyncio.sleep(3600)
    return {"attempt": job.attempt}


def _job_type(handler: str, **extra: Any) -> dict[str, Any]:
    retry = {"strategy": "fixed", "delay": "10s", "max_attempts": 3}
    return {"transport": {"python": {"handler": f"{HERE}:{handler}"}}, "retry": retry, **extra}


JOB_TYPES = {
    "gated": _job_type("gated"),
    "beat_once": _job_type("beat_once", timeout="30s"),
    "scripted": _job_type(
        "scripted", timeout="20s", retry={"strategy": "fixed", "delay": "5s", "max_attempts": 3}
    ),
}


@pytest.fixture(autouse=True)
def _clean_gates() -> None:
    GATES.clear()
    STARTED.clear()


# -- driving services -------------------------------------------------------------------

Factory = Callable[..., Awaitable[Service]]


@pytest.fixture
async def services(database_url: str) -> AsyncIterator[Factory]:
    """Build services on the test's database; every one is stopped at the end."""
    made: list[Service] = []

    async def build(
        clock: FakeClock, owner: str = "a", start: bool = True, **overrides: Any
    ) -> Service:
        overrides.setdefault("job_types", JOB_TYPES)
        svc = Service(
            make_settings(database_url, **overrides), clock=clock, owner=owner, run_loops=False
        )
        made.append(svc)
        if start:
            await svc.start()
        return svc

    yield build
    for svc in reversed(made):
        await svc.stop()


async def owned(svc: Service, queue: str = "default") -> QueueLoop:
    loop = svc.loops[queue]
    assert await loop.acquire()
    return loop


def recording(svc: Service, queue: str = "default") -> RecordingTransport:
    """Every job type of the queue's loop goes to a recording transport: the test
    reports outcomes itself and needs no pause for handlers."""
    transport = RecordingTransport()
    loop = svc.loops[queue]
    loop.transports = dict.fromkeys(loop.transports, transport)
    return transport


async def add(svc: Service, **fields: Any) -> Job:
    new = svc.intake.resolve({"type": "ok", **fields}, svc.clock())
    [job] = (await svc.store.job_insert_many([new], svc.clock())).jobs
    return job


async def tick(loop: QueueLoop, pause: float = 0.01) -> TickReport:
    """One tick, then a moment for the handlers it dispatched to report."""
    report = await loop.run_once()
    await asyncio.sleep(pause)
    return report


async def get(svc: Service, job: Job) -> Job:
    return await svc.store.job_get(job.id)


async def history(svc: Service, job: Job) -> list[tuple[int, str]]:
    return [(a.attempt, a.outcome) for a in await svc.store.job_attempts(job.id)]


# -- capacity and order -----------------------------------------------------------------


async def test_weighted_capacity_is_never_exceeded(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock, queues={"default": {"concurrency": 5}})
    transport = recording(svc)
    loop = await owned(svc)
    weights = [3, 2, 1, 4, 2, 1, 5, 1, 3]
    jobs = [await add(svc, type="gated", weight=w) for w in weights]
    peak = 0
    for _ in range(40):
        await loop.run_once()
        held = sum(j.weight for j in loop.in_flight.values())
        stored = (await svc.store.queue_counts("default", clock())).weight_in_flight
        assert held == stored <= 5
        peak = max(peak, held)
        if not loop.in_flight:
            break
        # Finish the oldest running job; the next tick settles it and admits more.
        transport.succeed(min(loop.in_flight))
    assert peak == 5
    # Weighted admission never lets a light job overtake a heavier one that waits.
    started = [j.id for j in transport.dispatched]
    assert started == [j.id for j in jobs]
    assert [(await get(svc, j)).state for j in jobs] == [State.COMPLETED] * len(jobs)


async def test_job_heavier_than_the_capacity_waits_without_blocking_the_queue(
    services: Factory,
) -> None:
    # The API refuses such a job (422); it happens when an operator lowers a
    # queue's concurrency below the weight of jobs already stored, and restarts.
    clock = FakeClock()
    svc = await services(clock, queues={"default": {"concurrency": 2}})
    [stored] = (
        await svc.store.job_insert_many(
            [NewJob(type="ok", queue="default", payload={}, run_at=clock(), weight=3)], clock()
        )
    ).jobs
    heavy = stored
    light = await add(svc, weight=1)
    loop = await owned(svc)
    await tick(loop)
    await tick(loop)
    assert (await get(svc, light)).state == State.COMPLETED
    waiting = await get(svc, heavy)
    assert (waiting.state, waiting.waiting_reason) == (
        State.SCHEDULED,
        "weight 3 exceeds the capacity of 2",
    )


@pytest.mark.parametrize(
    ("throttlers", "reads"),
    [
        # Capacity alone admits a prefix of the queue order: a tick reads only what fits.
        ([], [3, 1]),
        # A per-key limit may hold a job that a later one passes: a tick reads the backlog.
        ([{"per_key": {"key": "labels.tenant", "limit": 100}}], [10, 7]),
    ],
)
async def test_a_tick_reads_the_backlog_only_where_its_chain_needs_it(
    services: Factory, throttlers: list[dict[str, Any]], reads: list[int]
) -> None:
    clock = FakeClock()
    queue = {"concurrency": 3, "throttlers": throttlers}
    svc = await services(clock, queues={"default": queue})
    transport = recording(svc)
    loop = await owned(svc)
    jobs = [await add(svc, type="gated", labels={"tenant": "a"}) for _ in range(10)]
    first = await loop.run_once()
    transport.succeed(jobs[0].id)
    second = await loop.run_once()
    assert [first.loaded, second.loaded] == reads
    # The same jobs run either way, in queue order.
    started = [j.id for j in transport.dispatched]
    assert started == [j.id for j in jobs[:4]]


@pytest.mark.parametrize("order", ["time_priority", "priority_time"])
@pytest.mark.parametrize("lend", [False, True])
async def test_a_full_share_backlog_does_not_hide_other_shares(
    services: Factory, order: str, lend: bool
) -> None:
    """More held east jobs at the front of the queue than a tick reads: the west job
    and the unlisted one behind them still start, since each share is read too."""
    clock = FakeClock()
    share = {"label": "region", "shares": {"east": 50, "west": 25}, "other": 25, "lend": lend}
    queue = {"concurrency": 4, "batch_size": 3, "order": order, "throttlers": [{"share": share}]}
    svc = await services(clock, queues={"default": queue})
    transport = recording(svc)
    loop = await owned(svc)
    east = [await add(svc, type="gated", labels={"region": "east"}) for _ in range(8)]
    west = await add(svc, type="gated", labels={"region": "west"})
    south = await add(svc, type="gated")  # no region: the `other` share
    first = await loop.run_once()
    started = [j.id for j in transport.dispatched]
    assert first.full
    # With lending too: west and other take their own quotas before east may borrow.
    assert sorted(started) == sorted([east[0].id, east[1].id, west.id, south.id])
    if not lend:
        assert (await get(svc, east[2])).waiting_reason == "share region=east 2/2 in use"
    # The merged read keeps queue order: east's head went first, within its share.
    assert started.index(east[0].id) < started.index(east[1].id)
    for job in (west, south):
        assert (await get(svc, job)).state == State.RUNNING


async def test_a_share_that_a_full_read_barely_reaches_gets_all_its_room(
    services: Factory,
) -> None:
    """The read reaches one west job behind a held east backlog: the other west jobs
    behind the read start in the same tick, up to west's quota."""
    clock = FakeClock()
    share = {"label": "region", "shares": {"east": 50, "west": 50}}
    queue = {"concurrency": 6, "batch_size": 5, "throttlers": [{"share": share}]}
    svc = await services(clock, queues={"default": queue})
    transport = recording(svc)
    loop = await owned(svc)
    regions = ["east"] * 4 + ["west"] + ["east"] * 3 + ["west"] * 3
    jobs = [await add(svc, type="gated", labels={"region": r}) for r in regions]
    await loop.run_once()
    dispatched = {j.id for j in transport.dispatched}
    started = {j.id for j in jobs if j.id in dispatched}
    east = [j.id for j, r in zip(jobs, regions, strict=True) if r == "east"]
    west = [j.id for j, r in zip(jobs, regions, strict=True) if r == "west"]
    assert started == {*east[:3], *west[:3]}


async def test_a_loop_whose_whole_read_is_held_waits_instead_of_reading_again(
    database_url: str,
) -> None:
    """A full read of which every job is held changes nothing when read again at once:
    the loop sleeps until something changes instead of spinning on the database."""
    share = {"label": "region", "shares": {"east": 50, "west": 50}}
    queue = {"concurrency": 4, "batch_size": 3, "batch_interval": "1s"}
    settings = make_settings(
        database_url,
        job_types=JOB_TYPES,
        queues={"default": {**queue, "throttlers": [{"share": share}]}},
    )
    svc = Service(settings, owner="spin")
    ticks: list[dict[str, Any]] = []

    def held(name: str, fields: dict[str, Any]) -> None:
        if name == "throttled" and any(fields["held_by"].values()):  # a tick that held
            ticks.append(fields)

    svc.events.subscribe(held)
    await svc.start()
    try:
        east = [
            svc.intake.resolve({"type": "gated", "labels": {"region": "east"}}, svc.clock())
            for _ in range(10)
        ]
        await svc.store.job_insert_many(east, svc.clock())
        await asyncio.sleep(2.0)
        # Spinning did hundreds of ticks a second; waiting does one per interval or wake.
        assert 1 <= len(ticks) <= 10, len(ticks)
        assert sorted(STARTED) == STARTED[:2] and len(STARTED) == 2
    finally:
        await svc.stop()


@pytest.mark.parametrize(
    ("order", "expected"), [("time_priority", "ACB"), ("priority_time", "BAC")]
)
async def test_queue_order(services: Factory, order: str, expected: str) -> None:
    clock = FakeClock()
    svc = await services(clock, queues={"default": {"concurrency": 1, "order": order}})
    loop = await owned(svc)
    now = clock()
    for name, ago, priority in [("A", 10, 200), ("B", 5, 50), ("C", 10, 300)]:
        await add(
            svc,
            type="record",
            payload={"name": name},
            priority=priority,
            run_at=now - timedelta(seconds=ago),
        )
    for _ in range(5):
        await tick(loop)
    assert "".join(payload["name"] for _, _, payload in handlers.SEEN) == expected


# -- outcomes, retries, timeouts --------------------------------------------------------


async def test_failing_job_is_retried_after_its_delay_and_then_fails(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    job = await add(svc, type="fail")
    t0 = clock()
    for attempt in (1, 2, 3):
        assert (await tick(loop)).admitted == 1
        assert (await get(svc, job)).attempt == attempt
        report = await tick(loop)
        assert report.settled == 1
        current = await get(svc, job)
        if attempt < 3:
            assert current.state == State.SCHEDULED
            assert current.run_at == clock() + timedelta(seconds=10)
            assert current.last_error == f"RuntimeError: failing on attempt {attempt}"
            clock.advance(9.999)
            assert (await tick(loop)).admitted == 0  # not before its run_at
            assert (await get(svc, job)).attempt == attempt
            clock.advance(0.001)
    done = await get(svc, job)
    assert (done.state, done.attempt) == (State.FAILED, 3)
    assert done.finished_at == t0 + timedelta(seconds=20)
    assert done.last_error == "gave up after 3 attempts: RuntimeError: failing on attempt 3"
    attempts = await svc.store.job_attempts(job.id)
    assert [(a.attempt, a.outcome) for a in attempts] == [
        (1, "retried"),
        (2, "retried"),
        (3, "failed"),
    ]
    assert [a.started_at for a in attempts] == [t0 + timedelta(seconds=s) for s in (0, 10, 20)]
    assert loop.in_flight == {}


async def test_permanent_error_fails_at_once(services: Factory) -> None:
    svc = await services(FakeClock())
    loop = await owned(svc)
    job = await add(svc, type="permanent")
    await tick(loop)
    await tick(loop)
    done = await get(svc, job)
    assert (done.state, done.attempt) == (State.FAILED, 1)
    assert done.last_error == "not retryable: PermanentError: will never work"
    assert await history(svc, job) == [(1, "failed")]


async def test_success_records_the_result(services: Factory) -> None:
    svc = await services(FakeClock())
    loop = await owned(svc)
    job = await add(svc, payload={"n": 1})
    await tick(loop)
    await tick(loop)
    done = await get(svc, job)
    assert (done.state, done.result, done.deadline) == (State.COMPLETED, {"echo": {"n": 1}}, None)
    assert await history(svc, job) == [(1, "completed")]


async def test_timeout_fails_the_attempt_and_cancels_the_handler(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    job = await add(svc, type="hang", timeout="30s")
    await tick(loop)
    assert job.id in handlers.RUNNING
    clock.advance(29.9)
    assert (await tick(loop)).settled == 0
    assert (await get(svc, job)).state == State.RUNNING
    clock.advance(0.1)
    assert (await tick(loop)).settled == 1
    retried = await get(svc, job)
    assert (retried.state, retried.last_error) == (State.SCHEDULED, "timed out after 30s")
    assert retried.run_at == clock() + timedelta(seconds=10)
    assert job.id not in handlers.RUNNING  # the handler's task was cancelled
    assert await history(svc, job) == [(1, "retried")]


async def test_heartbeat_extends_the_deadline(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    job = await add(svc, type="beat_once", payload={"extend": 60})
    t0 = clock()
    await loop.run_once()
    assert loop.in_flight[job.id].deadline == t0 + timedelta(seconds=30)
    # The handler beats only once the old deadline has passed; it still counts.
    clock.advance(35)
    await asyncio.sleep(0.01)
    assert (await tick(loop)).settled == 0
    running = await get(svc, job)
    assert (running.state, running.deadline) == (State.RUNNING, t0 + timedelta(seconds=95))
    clock.advance(59.9)
    assert (await tick(loop)).settled == 0
    clock.advance(0.1)
    assert (await tick(loop)).settled == 1
    assert (await get(svc, job)).last_error == "timed out after 30s"


async def test_retry_starts_from_the_checkpointed_payload(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    job = await add(svc, type="checkpointing", payload={"step": 0, "keep": "me"})
    for step in (1, 2):
        await tick(loop)
        await tick(loop)
        retried = await get(svc, job)
        assert (retried.state, retried.payload) == (State.SCHEDULED, {"step": step, "keep": "me"})
        clock.advance(10)
    await tick(loop)
    await tick(loop)
    done = await get(svc, job)
    assert (done.state, done.attempt, done.result) == (State.COMPLETED, 3, {"finished_at_step": 3})
    assert done.payload == {"step": 3, "keep": "me"}


async def test_cancel_of_a_running_job(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    job = await add(svc, type="hang")
    await tick(loop)
    assert job.id in handlers.RUNNING
    asked = await svc.store.job_cancel(job.id, clock())
    assert (asked.state, asked.cancel_requested) == (State.RUNNING, True)
    clock.advance(1)
    assert (await tick(loop)).settled == 1
    done = await get(svc, job)
    assert (done.state, done.finished_at, done.cancel_requested) == (
        State.CANCELLED,
        clock(),
        False,
    )
    assert job.id not in handlers.RUNNING
    assert await history(svc, job) == [(1, "cancelled")]
    assert loop.in_flight == {}


async def test_unknown_job_type_in_the_database_fails_without_retry(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock)
    loop = await owned(svc)
    new = NewJob(
        type="vanished",
        queue="default",
        payload={},
        run_at=clock(),
        retry={"strategy": "fixed", "delay": 1, "max_attempts": 5},
    )
    [job] = (await svc.store.job_insert_many([new], clock())).jobs
    await tick(loop)
    await tick(loop)
    done = await get(svc, job)
    assert (done.state, done.attempt) == (State.FAILED, 1)
    assert "unknown job type 'vanished'" in (done.last_error or "")
    assert await history(svc, job) == [(1, "failed")]


async def test_job_outside_its_windows_is_deferred_without_an_attempt(services: Factory) -> None:
    clock = FakeClock()  # Monday 12:00 UTC
    svc = await services(clock)
    loop = await owned(svc)
    # Attempt 1 runs inside the window and fails; its retry falls after the window closed.
    window = {"start": "12:00:00", "end": "12:00:05", "tz": "UTC"}
    job = await add(svc, type="record", payload={"fail_until": 1}, windows=[window])
    t0 = clock()
    await tick(loop)
    await tick(loop)
    assert (await get(svc, job)).run_at == t0 + timedelta(seconds=10)
    clock.advance(10)
    report = await tick(loop)
    assert (report.admitted, report.deferred) == (0, 1)
    deferred = await get(svc, job)
    assert (deferred.state, deferred.attempt, deferred.run_at) == (
        State.SCHEDULED,
        1,
        t0 + timedelta(days=1),
    )
    assert deferred.waiting_reason == "outside its time windows"
    assert await history(svc, job) == [(1, "retried")]
    clock.now = t0 + timedelta(days=1) - timedelta(seconds=1)
    assert (await tick(loop)).admitted == 0
    clock.now = t0 + timedelta(days=1)
    assert (await tick(loop)).admitted == 1
    await tick(loop)
    done = await get(svc, job)
    assert (done.state, done.attempt) == (State.COMPLETED, 2)


async def test_paused_queue_admits_nothing_but_still_settles(services: Factory) -> None:
    svc = await services(FakeClock())
    loop = await owned(svc)
    first = await add(svc, type="gated")
    await tick(loop)
    await svc.store.queue_set_paused("default", True)
    second = await add(svc)
    gate(first.id).set()
    await asyncio.sleep(0.01)
    report = await tick(loop)
    assert (report.settled, report.admitted, report.loaded) == (1, 0, 0)
    assert (await get(svc, first)).state == State.COMPLETED
    assert (await get(svc, second)).state == State.SCHEDULED
    await svc.store.queue_set_paused("default", False)
    assert (await tick(loop)).admitted == 1
    await tick(loop)
    assert (await get(svc, second)).state == State.COMPLETED


async def test_a_paused_loop_is_woken_by_its_resume_not_by_new_jobs(services: Factory) -> None:
    svc = await services(FakeClock())
    loop = await owned(svc)
    await svc.store.queue_set_paused("default", True)
    await tick(loop)  # it learns that it is paused
    loop.wake.clear()
    await add(svc)
    assert not loop.wake.is_set()  # the job would only find it paused
    await svc.store.queue_set_paused("default", False)
    assert loop.wake.is_set()
    assert (await tick(loop)).admitted == 1


async def test_next_wake_is_the_earliest_of_tick_lease_due_job_and_deadline(
    services: Factory,
) -> None:
    clock = FakeClock()
    svc = await services(clock, queues={"default": {"batch_interval": "2s"}}, lease_ttl="30s")
    loop = await owned(svc)
    now = clock()
    assert loop.next_wake(now, None) == 2.0
    assert loop.next_wake(now, now + timedelta(seconds=0.5)) == 0.5
    assert loop.next_wake(now, now - timedelta(seconds=5)) == 0.0
    await add(svc, type="hang", timeout="1.5s")
    await tick(loop)
    assert loop.next_wake(now, None) == 1.5
    slow = await services(
        clock,
        owner="b",
        start=False,
        queues={"default": {"batch_interval": "1m"}},
        lease_ttl="30s",
    )
    assert slow.loops["default"].next_wake(now, None) == 10.0  # a third of the lease


async def test_a_loop_held_by_a_rate_wakes_when_the_oldest_start_leaves_the_window(
    services: Factory,
) -> None:
    clock = FakeClock()
    queue = {"batch_interval": "1m", "throttlers": [{"rate": {"limit": 2, "per": "10s"}}]}
    svc = await services(clock, queues={"default": queue}, lease_ttl="10m")
    loop = await owned(svc)
    for _ in range(5):
        await add(svc, type="gated")
    first = await tick(loop)
    assert (first.admitted, first.held) == (2, 3)
    clock.advance(3)
    # Not the minute's tick: the moment a start falls out of the 10 s window.
    assert loop.next_wake(clock(), None) == pytest.approx(7.001)
    clock.advance(7.001)
    assert (await tick(loop)).admitted == 2
    # Once nothing is held by the rate, the loop waits for its interval again.
    clock.advance(20)
    assert (await tick(loop)).admitted == 1
    for job_id in list(loop.in_flight):
        gate(job_id).set()
    await asyncio.sleep(0.01)
    await tick(loop)
    assert not loop.in_flight and loop.next_wake(clock(), None) == 60.0


# -- ownership: crashes and takeovers ----------------------------------------------------


async def test_crash_recovery_redispatches_running_and_keeps_awaiting(services: Factory) -> None:
    clock = FakeClock()
    t0 = clock()
    first = await services(clock, owner="first")
    loop = await owned(first)
    running = await add(first, type="gated")
    awaiting = await add(first, type="gated", timeout="120s")
    await tick(loop)
    loop.sent(loop.in_flight[awaiting.id])  # what a transport reports once its request left
    await tick(loop)
    assert (await get(first, awaiting)).state == State.AWAITING
    assert (await get(first, running)).state == State.RUNNING
    # The process dies: its tasks end and its lease is never released.
    loop.token = None
    await first.stop()

    second = await services(clock, owner="second")
    successor = second.loops["default"]
    # The dead owner's lease is live until it expires, unless the process guard proves
    # the old process gone (a single-process database, SQLite's file lock): then its
    # leases were cleared at start.
    held = (await second.store.queue_counts("default", clock())).lease_owner
    assert held == (None if second.store.dialect.single_process else "first")
    clock.advance(second.settings.lease_ttl + 0.001)
    gate(running.id).set()
    assert await successor.acquire()
    await asyncio.sleep(0.01)
    assert STARTED == [running.id, awaiting.id, running.id]  # only `running` is sent again
    await tick(successor)
    done = await get(second, running)
    assert (done.state, done.attempt) == (State.COMPLETED, 1)
    # `awaiting` keeps waiting for its response until its deadline.
    clock.now = t0 + timedelta(seconds=119.9)
    assert (await tick(successor)).settled == 0
    assert (await get(second, awaiting)).state == State.AWAITING
    clock.now = t0 + timedelta(seconds=120)
    await tick(successor)
    timed_out = await get(second, awaiting)
    assert (timed_out.state, timed_out.last_error) == (State.SCHEDULED, "timed out after 120s")
    clock.advance(10)
    gate(awaiting.id).set()
    await tick(successor)
    await tick(successor)
    done = await get(second, awaiting)
    assert (done.state, done.attempt) == (State.COMPLETED, 2)
    assert await history(second, awaiting) == [(1, "retried"), (2, "completed")]


async def test_stale_owner_writes_nothing_and_loses_no_job(services: Factory) -> None:
    clock = FakeClock()
    svc = await services(clock, owner="a")
    stale = await owned(svc)
    quick = await add(svc)
    slow = await add(svc, type="gated")
    await tick(stale)  # both claimed; `quick` reports its result to the stale loop
    assert set(stale.in_flight) == {quick.id, slow.id}
    # Another process takes the queue over once the lease expired (a long pause, say).
    clock.advance(svc.settings.lease_ttl + 1)
    other = await services(clock, owner="b", start=False)
    successor = await owned(other)
    later = await add(svc)
    report = await stale.run_once()
    assert (report.settled, report.admitted) == (0, 0)
    assert stale.token is None and stale.in_flight == {}
    assert (await get(svc, quick)).state == State.RUNNING  # the stale result was not written
    assert (await get(svc, later)).state == State.SCHEDULED
    assert not await stale.acquire()
    # The new owner re-ran what was running and finishes everything.
    gate(slow.id).set()
    for _ in range(4):
        await tick(successor)
    for job in (quick, slow, later):
        done = await get(svc, job)
        assert (done.state, done.attempt) == (State.COMPLETED, 1)
        assert await history(svc, job) == [(1, "completed")]


# -- property: capacity and no lost jobs --------------------------------------------------

CAPACITY = 4
OUTCOME = st.sampled_from(["ok", "fail", "permanent", "hang"])
ENQUEUE = st.tuples(
    st.just("enqueue"),
    st.lists(
        st.tuples(st.integers(1, CAPACITY), st.lists(OUTCOME, min_size=1, max_size=3)),
        min_size=1,
        max_size=4,
    ),
)
OPS = st.lists(
    st.one_of(ENQUEUE, st.just(("tick",)), st.tuples(st.just("advance"), st.floats(0, 30))),
    min_size=1,
    max_size=25,
)


def _fresh_sqlite(template: Path) -> tuple[str, Path]:
    folder = Path(tempfile.mkdtemp(prefix="hipq-prop-"))
    shutil.copy(template, folder / "hipq.db")
    return f"sqlite+aiosqlite:///{folder / 'hipq.db'}", folder


async def _check_in_flight(svc: Service, loop: QueueLoop) -> None:
    held = sum(j.weight for j in loop.in_flight.values())
    stored = (await svc.store.queue_counts("default", svc.clock())).weight_in_flight
    assert held == stored <= CAPACITY


async def _run_scenario(url: str, ops: list[tuple[Any, ...]]) -> None:
    clock = FakeClock()
    settings_ = make_settings(
        url, queues={"default": {"concurrency": CAPACITY}}, job_types=JOB_TYPES
    )
    svc = Service(settings_, clock=clock, owner="prop", run_loops=False)
    await svc.start()
    try:
        loop = await owned(svc)
        ids: list[int] = []
        for op in ops:
            if op[0] == "enqueue":
                new = [
                    svc.intake.resolve(
                        {"type": "scripted", "weight": w, "payload": {"script": script}}, clock()
                    )
                    for w, script in op[1]
                ]
                ids += [j.id for j in (await svc.store.job_insert_many(new, clock())).jobs]
            elif op[0] == "tick":
                await loop.run_once()
                await _check_in_flight(svc, loop)
                await asyncio.sleep(0)
            else:
                clock.advance(op[1])
        # Let the clock run long enough for every attempt to end (timeouts are 20s).
        for _ in range(400):
            await loop.run_once()
            await _check_in_flight(svc, loop)
            await asyncio.sleep(0)
            jobs = [await svc.store.job_get(i) for i in ids]
            if all(j.state in (State.COMPLETED, State.FAILED) for j in jobs):
                break
            clock.advance(7)
        else:
            raise AssertionError(f"jobs never finished: {[(j.id, j.state) for j in jobs]}")
        for job in jobs:
            script = job.payload["script"]
            attempts = await svc.store.job_attempts(job.id)
            # Every attempt is recorded once, and the job ends as its script says.
            assert [a.attempt for a in attempts] == list(range(1, job.attempt + 1))
            last = script[min(job.attempt, len(script)) - 1]
            assert (job.state == State.COMPLETED) == (last == "ok")
            assert attempts[-1].outcome == job.state.value
    finally:
        await svc.stop()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_property_capacity_holds_and_no_job_is_lost(
    sqlite_template: Path, ops: list[tuple[Any, ...]]
) -> None:
    url, folder = _fresh_sqlite(sqlite_template)
    try:
        asyncio.run(_run_scenario(url, ops))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
