"""After a crash, a queue's new owner sends `running` jobs again at once, or, where the
job type says `after_crash: retry`, after its retry strategy's delay (both engines).

The crash is the owner losing its lease with its jobs running, and a new owner taking
the queue over: what a killed process leaves behind (tests/e2e kills real ones).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests import handlers
from tests.api.conftest import Api, open_api
from tests.support import eventually

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # the FakeClock's start
HANG = {
    "transport": {"python": {"handler": "tests.handlers:hang"}},
    "retry": {"strategy": "fixed", "delay": "10s", "max_attempts": 3},
}


async def crash_and_take_over(api: Api) -> None:
    loop = api.loop()
    await api.service.store.lease_clear_all()  # the dead owner's lease, expired
    loop._lose_lease()  # the dead owner's tasks are gone
    assert await loop.acquire()


async def test_running_jobs_are_sent_again_at_once_by_default(database_url: str) -> None:
    async with open_api(database_url, job_types={"resent": HANG}) as api:
        job = await api.post_job(type="resent")
        await api.tick()
        await crash_and_take_over(api)
        await eventually(lambda: job["id"] in handlers.RUNNING)
        again = await api.job(job["id"])
        assert again["state"] == "running" and again["attempt"] == 1


async def test_after_crash_retry_waits_for_the_retry_strategy(database_url: str) -> None:
    types = {"careful": {**HANG, "after_crash": "retry"}}
    async with open_api(database_url, job_types=types) as api:
        job = await api.post_job(type="careful")
        await api.tick()
        await crash_and_take_over(api)
        assert job["id"] not in handlers.RUNNING
        await api.tick(ticks=1)
        waiting = await api.job(job["id"])
        assert waiting["state"] == "scheduled" and waiting["attempt"] == 1
        assert datetime.fromisoformat(waiting["run_at"]) == NOW + timedelta(seconds=10)
        assert "interrupted" in waiting["last_error"]
