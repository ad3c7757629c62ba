"""GET /v1/jobs/{id}?wait=: the answer comes when the job finishes or the wait ends,
on both engines; waiters are woken by this process's loops, and on PostgreSQL by a
job that another process finished."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from hipq.api.arrival import ARRIVED, since_arrival
from hipq.api.slow_clients import header_timeout_protocol
from hipq.app import create_app
from hipq.lifecycle import State
from hipq.process.job_waiters import JobWaiters
from hipq.store import JobViews, Store
from tests.api.conftest import Api, open_api
from tests.peers import serve_app
from tests.support import eventually


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


async def test_waiters_beyond_one_checks_reads_are_answered_by_the_next_checks(
    database_url: str,
) -> None:
    async with open_api(database_url) as api:
        waiters = api.service.waiters
        waiters.recheck_seconds = 3600  # only the settles and the ends of the waits
        waiters.check_at_most = 5
        ran = [(await api.post_job(type="ok", payload={"i": i}))["id"] for i in range(12)]
        later = [
            (await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z"))["id"] for _ in range(12)
        ]
        waiting = [asyncio.create_task(get_waiting(api, i)) for i in ran]
        await started(api, 12)
        checks = waiters.checks
        await api.tick(ticks=3)
        answers = await asyncio.gather(*waiting)
        assert [a["state"] for a in answers] == ["completed"] * 12
        assert [a["id"] for a in answers] == ran
        checks = waiters.checks
        ended = await asyncio.gather(*(get_waiting(api, i, "300ms") for i in later))
        assert [a["state"] for a in ended] == ["scheduled"] * 12
        assert [a["id"] for a in ended] == later
        # 12 first reads and 12 ends, at most 5 jobs a check.
        assert waiters.checks - checks >= 6
        assert waiters.waiting == 0


async def test_a_wait_counts_from_the_requests_arrival(database_url: str) -> None:
    async with open_api(database_url) as api:
        later = await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        app = create_app(api.service, manage_service=False)

        async def arrived_long_ago(scope: dict[str, Any], receive: Any, send: Any) -> None:
            # As if the request had queued 59 s behind others before its route ran.
            scope[ARRIVED] = asyncio.get_running_loop().time() - 59
            await app(scope, receive, send)

        transport = httpx.ASGITransport(arrived_long_ago)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            asking = asyncio.create_task(client.get(f"/v1/jobs/{later['id']}?wait=60s"))
            # 1 s of its 60 s remain: answered long before a wait counted from the route.
            answer = await asyncio.wait_for(asking, 30)
        assert answer.status_code == 200 and answer.json()["state"] == "scheduled"


async def test_hipq_serves_protocol_stamps_each_requests_arrival() -> None:
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with serve_app(app, http=header_timeout_protocol(10)) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            assert (await client.get("/v1/jobs/1?wait=5s")).status_code == 204
    assert scopes[0][ARRIVED] <= asyncio.get_running_loop().time()
    assert since_arrival(scopes[0]) >= 0


class FirstReadHeld(Store):
    """The real store, whose first ``job_views`` hands its rows over only once let go."""

    reading = asyncio.Event()
    go_on = asyncio.Event()

    async def job_views(self, *args: Any, **kwargs: Any) -> JobViews:
        views = await super().job_views(*args, **kwargs)
        if not self.go_on.is_set():
            self.reading.set()
            await self.go_on.wait()
        return views


async def test_a_job_that_finishes_during_its_waiters_first_read_wakes_it(
    database_url: str,
) -> None:
    FirstReadHeld.reading, FirstReadHeld.go_on = asyncio.Event(), asyncio.Event()
    async with open_api(database_url) as api:
        job = await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        store = FirstReadHeld.from_url(database_url)
        waiters = JobWaiters(store, recheck_seconds=3600)  # only the wake-up may answer
        await waiters.start()
        try:
            waiting = asyncio.create_task(waiters.wait(job["id"], 60))
            await asyncio.wait_for(FirstReadHeld.reading.wait(), 30)  # it read: open
            done = await api.client.post(f"/v1/jobs/{job['id']}/complete", json={})
            assert done.status_code == 200
            waiters.on_settled(job["queue"])  # as the listener hands on settled:<queue>
            FirstReadHeld.go_on.set()
            view = await asyncio.wait_for(waiting, 30)
            assert view.job.state == State.COMPLETED
        finally:
            await waiters.stop()
            await store.close()


async def test_job_views_reads_open_jobs_of_if_finished_as_their_queue_alone(
    database_url: str,
) -> None:
    async with open_api(database_url) as api:
        done = await api.post_job(type="ok")
        await api.tick()
        open_one = await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        ids = [done["id"], open_one["id"], 999_999]
        views, open_queues = await api.service.store.job_views(ids, if_finished=ids)
        assert [(v.job.id, v.job.state) for v in views] == [(done["id"], State.COMPLETED)]
        assert views[0].attempts[0].outcome == "completed"
        assert open_queues == {open_one["id"]: "default"}
        # Without if_finished, each found job in full, whatever its state.
        views, open_queues = await api.service.store.job_views(ids)
        assert sorted(v.job.id for v in views) == sorted(ids[:2]) and open_queues == {}


async def test_a_job_this_process_saw_finish_is_read_in_full_at_once(database_url: str) -> None:
    async with open_api(database_url) as api:
        waiters = api.service.waiters
        waiters.recheck_seconds = 3600  # only the settle's event may wake it
        # (not the settled:<queue> wake-up PostgreSQL also sends, which reads the
        # waiters of the queue as their state and queue first)
        api.service.wakeups.settled.remove(waiters.on_settled)
        job = await api.post_job(type="ok")
        reads: list[tuple[list[int], set[int]]] = []
        job_views = api.service.store.job_views

        async def recorded(job_ids: Any, *, if_finished: Any = ()) -> JobViews:
            reads.append((list(job_ids), set(if_finished)))
            return await job_views(job_ids, if_finished=if_finished)

        api.service.store.job_views = recorded  # type: ignore[method-assign]
        waiting = asyncio.create_task(get_waiting(api, job["id"]))
        await started(api, 1)
        # Its first read: open, read as its state and queue.
        await eventually(lambda: reads and waiters._queue_of.get(job["id"]), timeout=60)
        assert reads[0] == ([job["id"]], {job["id"]})
        await api.tick()  # the loop runs it: its job_settled event wakes the waiter
        answer = await waiting
        assert answer["state"] == "completed"
        assert answer["attempts"][0]["outcome"] == "completed"
        # The event said finished: the read that answered it had no statement for its
        # state first.
        assert reads[1:] == [([job["id"]], set())]
        assert waiters.waiting == 0 and not waiters._finished
