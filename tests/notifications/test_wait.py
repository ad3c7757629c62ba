"""GET /v1/jobs/{id}?wait=: the answer comes when the job finishes or the wait ends,
on both engines; waiters are woken by this process's loops, and on PostgreSQL by a
job that another process finished."""

from __future__ import annotations

import asyncio

import pytest

from tests.api.conftest import Api, open_api


async def get_waiting(api: Api, job_id: int, wait: str = "30s") -> dict:
    answer = await api.client.get(f"/v1/jobs/{job_id}?wait={wait}")
    assert answer.status_code == 200, answer.text
    return answer.json()


async def started(api: Api, waiting: int) -> None:
    """Until ``waiting`` requests are registered (bounded)."""
    for _ in range(500):
        if api.service.waiters.waiting >= waiting and api.service.waiters._task is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{api.service.waiters.waiting} waiting, not {waiting}")


async def test_many_waiters_are_answered_when_the_loop_finishes_their_jobs(
    database_url: str,
) -> None:
    async with open_api(database_url) as api:
        api.service.waiters.recheck_seconds = 3600  # only the settle may wake them
        ids = [(await api.post_job(type="ok", payload={"i": i}))["id"] for i in range(50)]
        waiting = [asyncio.create_task(get_waiting(api, i)) for i in ids]
        await started(api, 50)
        assert not any(t.done() for t in waiting)
        await api.tick(ticks=12)  # the queue runs 10 at a time
        answers = await asyncio.gather(*waiting)
        assert [a["state"] for a in answers] == ["completed"] * 50
        assert [a["id"] for a in answers] == ids
        assert answers[0]["attempts"][0]["outcome"] == "completed"
        # Shared checks, none per waiter: the first reads, then at most two per tick
        # (the loop's event and, on PostgreSQL, the NOTIFY), not one per waiter.
        assert api.service.waiters.checks <= 2 * 12 < 50
        assert api.service.waiters.waiting == 0


async def test_a_finished_job_answers_at_once_and_an_open_one_when_the_wait_ends(
    database_url: str,
) -> None:
    async with open_api(database_url) as api:
        done = await api.post_job(type="ok")
        await api.tick()
        assert (await get_waiting(api, done["id"], "60s"))["state"] == "completed"
        later = await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        assert (await get_waiting(api, later["id"], "200ms"))["state"] == "scheduled"
        assert api.service.waiters.waiting == 0


async def test_waits_that_end_together_share_their_reads(database_url: str) -> None:
    async with open_api(database_url) as api:
        api.service.waiters.recheck_seconds = 3600  # only the ends of the waits
        later = [
            (await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z"))["id"] for _ in range(30)
        ]
        checks = api.service.waiters.checks
        answers = await asyncio.gather(*(get_waiting(api, i, "300ms") for i in later))
        assert [a["state"] for a in answers] == ["scheduled"] * 30
        assert [a["id"] for a in answers] == later
        # Their first reads and their ends are shared checks, not two reads per waiter.
        assert api.service.waiters.checks - checks < 30
        assert api.service.waiters.waiting == 0


async def test_an_operators_verb_wakes_a_waiter(database_url: str) -> None:
    async with open_api(database_url) as api:
        # SQLite has no NOTIFY: the waiters' periodic check finds it there.
        api.service.waiters.recheck_seconds = 0.05 if "sqlite" in database_url else 3600
        job = await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        waiting = asyncio.create_task(get_waiting(api, job["id"]))
        await started(api, 1)
        assert (await api.client.post(f"/v1/jobs/{job['id']}/cancel")).status_code == 200
        assert (await waiting)["state"] == "cancelled"


@pytest.mark.postgres
async def test_a_job_finished_by_another_process_wakes_a_waiter_here(postgres_url: str) -> None:
    from tests.conftest import _truncate

    await _truncate(postgres_url)
    async with open_api(postgres_url) as here, open_api(postgres_url) as there:
        here.service.waiters.recheck_seconds = 3600  # only the NOTIFY may wake it
        ran = await here.post_job(type="ok")
        by_hand = await here.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        waiting = [
            asyncio.create_task(get_waiting(here, ran["id"])),
            asyncio.create_task(get_waiting(here, by_hand["id"])),
        ]
        await started(here, 2)
        await there.tick()  # the other process's loop runs the first job
        answer = await there.client.post(f"/v1/jobs/{by_hand['id']}/complete", json={})
        assert answer.status_code == 200
        first, second = await asyncio.gather(*waiting)
        assert first["state"] == "completed" and second["state"] == "completed"


@pytest.mark.parametrize(
    ("wait", "problem"),
    [("61s", "at most 60s"), ("2m", "at most 60s"), ("soon", "invalid duration"), ("-1s", "")],
)
async def test_a_bad_wait_is_refused(sqlite_url: str, wait: str, problem: str) -> None:
    async with open_api(sqlite_url) as api:
        job = await api.post_job(type="ok")
        answer = await api.client.get(f"/v1/jobs/{job['id']}", params={"wait": wait})
        assert answer.status_code == 422, answer.text
        assert answer.json()["field"] == "wait" and problem in answer.json()["message"]


async def test_waiting_for_a_missing_job_is_a_404(sqlite_url: str) -> None:
    async with open_api(sqlite_url) as api:
        answer = await api.client.get("/v1/jobs/12345?wait=5s")
        assert answer.status_code == 404 and answer.json()["field"] == "id"
        assert api.service.waiters.waiting == 0


async def test_a_stopping_process_answers_its_waiters_at_once(sqlite_url: str) -> None:
    async with open_api(sqlite_url) as api:
        job = await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        waiting = asyncio.create_task(get_waiting(api, job["id"], "60s"))
        await started(api, 1)
        api.service.begin_stop(grace=0)  # as SIGTERM does
        assert (await waiting)["state"] == "scheduled"
