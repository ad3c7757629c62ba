"""A throttler that raises, answers garbage or overruns its time limit admits nothing
that tick; the queue goes on, the fault is counted, no job is lost or let through."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

import pytest

from hipq.batch_loop.admission import Admission
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.service import Service
from hipq.store import JobFilter
from hipq.throttling import RunningView, Stage, Verdict
from tests.support import FakeClock, make_settings


class Raising:
    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        raise RuntimeError("plugin bug")


class Garbage:
    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> object:
        return {"admit": "everything"}


class Slow:
    """Blocks until released: a throttler stuck on something."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        self.release.wait(10)
        return Verdict(admitted=[j.id for j in candidates])


@pytest.fixture
async def service(database_url: str) -> AsyncIterator[Service]:
    svc = Service(make_settings(database_url), clock=FakeClock(), run_loops=False)
    await svc.start()
    yield svc
    await svc.stop()


async def _with_stage(svc: Service, throttler: object, limit: float = 0.2) -> None:
    loop = svc.loops["default"]
    loop.admission.chain.close()
    config = loop.config.model_copy(update={"throttler_time_limit": limit})
    stages = [Stage("plugin", throttler)]  # type: ignore[arg-type]
    loop.admission = Admission("default", config, stages, loop.events)
    new = [svc.intake.resolve({"type": "ok"}, svc.clock()) for _ in range(3)]
    await svc.store.job_insert_many(new, svc.clock())
    assert await loop.acquire()


async def _states(svc: Service) -> list[str]:
    return sorted(j.state for j in await svc.store.job_list(JobFilter()))


@pytest.mark.parametrize("throttler", [Raising(), Garbage()], ids=["raises", "garbage"])
async def test_a_faulty_throttler_admits_nothing_and_is_counted(
    service: Service, throttler: object
) -> None:
    await _with_stage(service, throttler)
    report = await service.loops["default"].run_once()
    assert report.admitted == 0 and report.held == 3
    assert await _states(service) == [State.SCHEDULED] * 3
    held = await service.store.job_list(JobFilter())
    assert {j.waiting_reason for j in held} == {"throttler plugin failed"}
    counts = await service.store.queue_counts("default", service.clock())
    assert counts.stats["throttler_errors"] == {"plugin": 1}


async def test_a_throttler_over_its_time_limit_admits_nothing_then_recovers(
    service: Service,
) -> None:
    slow = Slow()
    await _with_stage(service, slow, limit=0.1)
    loop = service.loops["default"]
    assert (await loop.run_once()).admitted == 0  # overran its limit
    assert (await loop.run_once()).admitted == 0  # still busy: not called again
    counts = await service.store.queue_counts("default", service.clock())
    assert counts.stats["throttler_errors"] == {"plugin": 2}
    slow.release.set()
    for _ in range(50):  # the worker thread finishes its old call, then decides anew
        if (await loop.run_once()).admitted:
            break
    assert await _states(service) != [State.SCHEDULED] * 3
