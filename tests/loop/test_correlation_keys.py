"""Correlation keys built at claim time ({id}, {attempt}) and their collisions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from hipq.lifecycle import State
from hipq.service import Service
from tests.support import FakeClock, make_settings


@pytest.fixture
async def service(database_url: str) -> AsyncIterator[Service]:
    settings = make_settings(
        database_url,
        job_types={
            "keyed": {
                "correlation_key": "{payload.order}:{attempt}",
                "retry": {"strategy": "fixed", "delay": "1s", "max_attempts": 3},
                "transport": {"python": {"handler": "tests.handlers:fail"}},
            },
            # Its key is built at claim and may end in what the payload says.
            "tailed": {
                "correlation_key": "{payload.order}:{attempt}{payload.tail}",
                "transport": {"python": {"handler": "tests.handlers:fail"}},
            },
        },
    )
    svc = Service(settings, clock=FakeClock(), run_loops=False)
    await svc.start()
    yield svc
    await svc.stop()


async def _add(svc: Service, order: str) -> int:
    new = svc.intake.resolve({"type": "keyed", "payload": {"order": order}}, svc.clock())
    [job] = (await svc.store.job_insert_many([new], svc.clock())).jobs
    return job.id


async def test_each_attempt_gets_its_own_key(service: Service) -> None:
    job_id = await _add(service, "A-1")
    assert (await service.store.job_get(job_id)).correlation_key is None
    loop = service.loops["default"]
    assert await loop.acquire()
    await loop.run_once()
    assert (await service.store.job_get(job_id)).correlation_key == "A-1:1"
    await asyncio.sleep(0.01)
    await loop.run_once()  # the attempt failed: retried in 1s
    service.clock.advance(1)  # type: ignore[attr-defined]
    await loop.run_once()
    assert (await service.store.job_get(job_id)).correlation_key == "A-1:2"


async def test_a_colliding_key_fails_that_job_and_the_queue_goes_on(service: Service) -> None:
    first, second, other = [await _add(service, o) for o in ("B-1", "B-1", "C-1")]
    loop = service.loops["default"]
    assert await loop.acquire()
    report = await loop.run_once()
    assert report.admitted == 3
    await asyncio.sleep(0.01)
    await loop.run_once()
    clash = await service.store.job_get(second)
    assert clash.state == State.FAILED
    assert clash.last_error == (
        f"not retryable: correlation key 'B-1:1' is built by job {first} too"
    )
    assert (await service.store.job_get(first)).correlation_key == "B-1:1"
    assert (await service.store.job_get(other)).state == State.SCHEDULED  # retried, alive


@pytest.mark.parametrize(
    ("tail", "why"),
    [("/heartbeat", "must not end in '/heartbeat'"), ("\n", "control characters")],
)
async def test_a_key_built_at_claim_that_no_callback_can_reach_fails_the_job_at_once(
    service: Service, tail: str, why: str
) -> None:
    # It used to be sent and then wait for a callback that the heartbeat route took (or
    # no route matched) until its timeout.
    new = service.intake.resolve(
        {"type": "tailed", "payload": {"order": "D-1", "tail": tail}}, service.clock()
    )
    [job] = (await service.store.job_insert_many([new], service.clock())).jobs
    fine = await _add(service, "E-1")
    loop = service.loops["default"]
    assert await loop.acquire()
    await loop.run_once()
    await asyncio.sleep(0.01)
    await loop.run_once()
    failed = await service.store.job_get(job.id)
    assert failed.state == State.FAILED
    assert failed.last_error is not None and why in failed.last_error
    assert failed.correlation_key is None
    assert (await service.store.job_get(fine)).correlation_key == "E-1:1"
