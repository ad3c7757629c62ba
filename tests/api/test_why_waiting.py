"""Why a job waits, for every cause, on both engines: what GET /v1/jobs/{id}, the job
list, GET /v1/queues/{name} and /metrics say about a job that has not started."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Api, open_api

FULL_QUEUE = {"default": {"concurrency": 2}, "bulk": {}}


async def reasons(api: Api, ids: list[int]) -> list[str | None]:
    return [(await api.job(i))["waiting_reason"] for i in ids]


async def listed(api: Api, **params: Any) -> dict[int, str | None]:
    answer = await api.client.get("/v1/jobs", params={"state": "scheduled", **params})
    assert answer.status_code == 200, answer.text
    return {j["id"]: j["waiting_reason"] for j in answer.json()["jobs"]}


async def held_gauge(api: Api, throttler: str) -> str:
    text = (await api.client.get("/metrics")).text
    name = f'hipq_jobs_held{{queue="default",throttler="{throttler}"}}'
    return next(line.split()[-1] for line in text.splitlines() if line.startswith(name))


async def test_a_full_queue_says_so_on_each_due_job_in_its_stats_and_metrics(
    database_url: str,
) -> None:
    async with open_api(database_url, queues=FULL_QUEUE) as api:
        busy = [await api.post_job(type="hang") for _ in range(2)]
        await api.tick()
        assert [(await api.job(j["id"]))["state"] for j in busy] == ["running", "running"]
        # Posted once the capacity is all in use: no tick reads them.
        waiting = [(await api.post_job(type="ok"))["id"] for _ in range(3)]
        await api.tick()
        full = "queue full: concurrency 2/2 in use"
        assert await reasons(api, waiting) == [full] * 3
        assert await listed(api) == dict.fromkeys(waiting, full)
        queue = (await api.client.get("/v1/queues/default")).json()
        assert queue["held_by"] == {"concurrency": 3}
        assert await held_gauge(api, "concurrency") == "3.0"


async def test_a_paused_queue_says_so_before_and_after_its_tick(database_url: str) -> None:
    async with open_api(database_url) as api:
        await api.tick()  # the loop holds the queue's lease
        answer = await api.client.post("/v1/queues/default/pause")
        assert answer.status_code == 200, answer.text
        job = (await api.post_job(type="ok"))["id"]
        assert await reasons(api, [job]) == ["queue paused"]
        await api.tick()
        assert await reasons(api, [job]) == ["queue paused"]
        assert await listed(api) == {job: "queue paused"}
        queue = (await api.client.get("/v1/queues/default")).json()
        assert queue["held_by"] == {"paused": 1}
        assert await held_gauge(api, "paused") == "1.0"
        await api.client.post("/v1/queues/default/resume")
        await api.tick()
        assert (await api.job(job))["state"] == "completed"
        assert await held_gauge(api, "paused") == "0.0"


async def test_a_queue_no_process_runs_and_a_run_at_to_come(database_url: str) -> None:
    async with open_api(database_url) as api:
        due = (await api.post_job(type="ok"))["id"]
        later = (await api.post_job(type="ok", run_at="2030-01-02T03:04:05Z"))["id"]
        # No loop took the queue's lease yet.
        assert await reasons(api, [due, later]) == [
            "no process runs its queue",
            "not before 2030-01-02 03:04:05 UTC",
        ]
        await api.tick()
        assert (await api.job(due))["state"] == "completed"
        assert await reasons(api, [later]) == ["not before 2030-01-02 03:04:05 UTC"]


async def test_a_retry_to_come_says_which_attempt_and_when(database_url: str) -> None:
    async with open_api(database_url) as api:
        job = (await api.post_job(type="fail"))["id"]
        await api.tick()
        shown = await api.job(job)
        assert (shown["state"], shown["attempt"]) == ("scheduled", 1)
        at = api.clock().replace(microsecond=0).strftime("%Y-%m-%d %H:%M:%S")
        assert shown["waiting_reason"] is not None
        assert shown["waiting_reason"].startswith("retry 2 not before ")
        assert shown["waiting_reason"] >= f"retry 2 not before {at}"
        assert shown["last_error"]  # the error stays in its own field


THROTTLED = {
    "default": {},
    "bulk": {},
    "shared": {
        "concurrency": 2,
        "throttlers": [{"share": {"label": "region", "shares": {"east": 50, "west": 50}}}],
    },
    "keyed": {"throttlers": [{"per_key": {"key": "labels.tenant", "limit": 1}}]},
    # One read a tick, one started an hour: the third is never read while the second waits.
    "rated": {"batch_size": 1, "throttlers": [{"rate": {"limit": 1, "per": "1h"}}]},
}


async def test_each_throttler_a_window_and_a_job_not_read_yet_say_why(database_url: str) -> None:
    async with open_api(database_url, queues=THROTTLED) as api:

        async def post(queue: str, count: int, **fields: Any) -> list[int]:
            return [(await api.post_job(queue=queue, **fields))["id"] for _ in range(count)]

        shared = await post("shared", 2, type="hang", labels={"region": "east"})
        keyed = await post("keyed", 2, type="hang", labels={"tenant": "a"})
        rated = await post("rated", 3, type="ok")
        window = {"start": "13:00", "end": "14:00", "tz": "UTC"}  # the clock says 12:00
        (windowed,) = await post("default", 1, type="ok", windows=[window])
        for queue in THROTTLED:
            await api.tick(queue)
        day = api.clock().strftime("%Y-%m-%d")
        assert await reasons(api, [shared[1], keyed[1], *rated[1:], windowed]) == [
            "share region=east 1/1 in use",
            "per_key tenant=a 1/1 in flight",
            "rate 1 per 1h reached",
            "due: its queue's loop has not read it yet",
            f"outside its time windows: not before {day} 13:00:00 UTC",
        ]
        shown = await listed(api, queue="rated")
        assert shown == {rated[1]: "rate 1 per 1h reached", rated[2]: shown[rated[2]]}
        assert shown[rated[2]] == "due: its queue's loop has not read it yet"
