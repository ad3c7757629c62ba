"""hipq.testing: a user's test runs due jobs until the queues are idle, on a fake clock,
on both engines."""

from __future__ import annotations

import pytest

from hipq.lifecycle import State
from hipq.service import Service, ServiceError
from hipq.testing import FakeClock, NotIdle, manual_service, run_until_idle
from tests import handlers
from tests.support import make_settings


def service(database_url: str, clock: FakeClock, **overrides: object) -> Service:
    return manual_service(make_settings(database_url, **overrides), clock=clock)


async def test_due_jobs_run_and_their_outcomes_are_recorded(database_url: str) -> None:
    clock = FakeClock()
    async with service(database_url, clock) as svc:
        ok = await svc.add_job("ok", {"n": 1})
        perm = await svc.add_job("permanent")
        report = await run_until_idle(svc)
        assert (report.admitted, report.settled) == (2, 2)
        assert (await svc.get_job(ok.id)).state is State.COMPLETED
        assert (await svc.get_job(ok.id)).result == {"echo": {"n": 1}}
        assert (await svc.get_job(perm.id)).state is State.FAILED
        # Nothing left: a second run finds the queues idle at once.
        assert (await run_until_idle(svc)).admitted == 0


async def test_a_retry_runs_only_when_the_clock_reaches_it(database_url: str) -> None:
    clock = FakeClock()
    async with service(database_url, clock) as svc:  # record: retry fixed 10s, 3 attempts
        job = await svc.add_job("record", {"fail_until": 1})
        await run_until_idle(svc)
        first = await svc.get_job(job.id)
        assert (first.state, first.attempt) == (State.SCHEDULED, 1)
        assert first.last_error == "RuntimeError: attempt 1 fails"
        clock.advance(9)
        assert (await run_until_idle(svc)).admitted == 0
        clock.advance(1)
        await run_until_idle(svc)
        done = await svc.get_job(job.id)
        assert (done.state, done.result) == (State.COMPLETED, {"attempt": 2})
        assert [seen[1] for seen in handlers.SEEN] == [1, 2]


async def test_a_job_for_later_waits_for_the_clock(database_url: str) -> None:
    clock = FakeClock()
    async with service(database_url, clock) as svc:
        job = await svc.add_job("ok", run_in="1h")
        assert (await run_until_idle(svc)).admitted == 0
        clock.advance(3600)
        await run_until_idle(svc)
        assert (await svc.get_job(job.id)).state is State.COMPLETED


async def test_schedules_fire_by_the_fake_clock(database_url: str) -> None:
    clock = FakeClock()  # 2026-01-05 12:00 UTC
    schedules = {"hourly": {"cron": "0 * * * *", "job": {"type": "ok"}}}
    async with service(database_url, clock, schedules=schedules) as svc:
        await run_until_idle(svc)
        before = len(await svc.list_jobs(type="ok"))
        clock.advance(3600)
        report = await run_until_idle(svc)
        assert report.scheduled == 1
        jobs = await svc.list_jobs(type="ok")
        assert len(jobs) == before + 1
        assert jobs[0].state is State.COMPLETED


async def test_a_handler_that_hangs_is_reported_not_waited_for(database_url: str) -> None:
    clock = FakeClock()
    async with service(database_url, clock, shutdown_grace=0) as svc:
        job = await svc.add_job("hang")
        with pytest.raises(NotIdle, match=rf"handlers still running after 0.5s: jobs \[{job.id}\]"):
            await run_until_idle(svc, timeout=0.5)


async def test_a_job_retried_at_once_forever_is_reported(database_url: str) -> None:
    clock = FakeClock()
    retry = {"strategy": "fixed", "delay": 0, "max_attempts": 1000}
    types = {"fail": {"transport": {"python": {"handler": "tests.handlers:fail"}}, "retry": retry}}
    async with service(database_url, clock, job_types=types) as svc:
        await svc.add_job("fail")
        with pytest.raises(NotIdle, match="still busy after 5 rounds"):
            await run_until_idle(svc, max_rounds=5)


async def test_a_service_whose_loops_run_is_refused(database_url: str) -> None:
    svc = Service.from_config(make_settings(database_url))
    with pytest.raises(ServiceError, match="manual_service"):
        await run_until_idle(svc)
    await svc.store.close()
    manual = service(database_url, FakeClock())
    with pytest.raises(ServiceError, match="not started"):
        await run_until_idle(manual)
    await manual.store.close()
