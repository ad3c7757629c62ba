"""The pull workers' routes on both engines: fetch, each report, stale tokens, limits.

The service runs without its loops on a fake clock: the test ticks the queue by
hand (``api.tick()``), as the queue's owner would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.api.conftest import Api, open_api

PULL = {
    "pull_a": {
        "transport": "pull",
        "timeout": "60s",
        "retry": {"strategy": "fixed", "delay": "0s"},
    },
    "pull_b": {"transport": {"pull": {}}, "queue": "other", "heartbeat_timeout": "20s"},
}
QUEUES = {"default": {"concurrency": 2}, "other": {}, "bulk": {}}


@pytest.fixture
async def api(database_url: str) -> Any:
    async with open_api(database_url, job_types=PULL, queues=QUEUES) as opened:
        yield opened


async def fetch(api: Api, types: list[str], count: int = 10, wait: float = 0) -> list[dict]:
    response = await api.client.post(
        "/v1/workers/fetch", json={"types": types, "count": count, "wait": wait}
    )
    assert response.status_code == 200, response.text
    return response.json()["jobs"]


async def report(api: Api, job: dict, verb: str, **body: Any) -> Any:
    return await api.client.post(
        f"/v1/workers/jobs/{job['id']}/{verb}", json={"token": job["token"], **body}
    )


async def test_fetch_then_complete(api: Api) -> None:
    posted = await api.post_job(type="pull_a", payload={"n": 1}, labels={"region": "east"})
    assert await fetch(api, ["pull_a"]) == []  # not claimed yet: nothing to take
    await api.tick()
    [job] = await fetch(api, ["pull_a"])
    assert job["id"] == posted["id"]
    assert (job["payload"], job["labels"], job["attempt"]) == ({"n": 1}, {"region": "east"}, 1)
    assert job["token"] and job["deadline"]
    assert await fetch(api, ["pull_a"]) == []  # taken: no second worker gets it
    done = await report(api, job, "complete", result={"sum": 3})
    assert done.status_code == 202, done.text
    await api.tick()
    shown = await api.job(job["id"])
    assert shown["state"] == "completed"
    assert shown["result"] == {"sum": 3}


async def test_fail_is_retried_then_fetched_again_with_a_new_token(api: Api) -> None:
    posted = await api.post_job(type="pull_a")
    await api.tick()
    [first] = await fetch(api, ["pull_a"])
    failed = await report(api, first, "fail", error="disk full", traceback="Traceback ...")
    assert failed.status_code == 202, failed.text
    await api.tick()
    shown = await api.job(posted["id"])
    assert shown["attempts"][0]["error"] == "disk full"
    assert shown["attempts"][0]["traceback"] == "Traceback ..."
    await api.tick()
    [second] = await fetch(api, ["pull_a"])
    assert (second["id"], second["attempt"]) == (posted["id"], 2)
    assert second["token"] != first["token"]
    # The first attempt's token is stale now: its report is refused and changes nothing.
    stale = await report(api, first, "complete", result="late")
    assert stale.status_code == 409
    assert stale.json()["field"] == "token"
    assert (await report(api, second, "complete", result="ok")).status_code == 202
    await api.tick()
    assert (await api.job(posted["id"]))["result"] == "ok"


async def test_not_retryable_failure_fails_the_job_now(api: Api) -> None:
    posted = await api.post_job(type="pull_a")
    await api.tick()
    [job] = await fetch(api, ["pull_a"])
    await report(api, job, "fail", error="bad input", retryable=False)
    await api.tick()
    assert (await api.job(posted["id"]))["state"] == "failed"


async def test_snooze_gives_the_attempt_back(api: Api) -> None:
    posted = await api.post_job(type="pull_a")
    await api.tick()
    [job] = await fetch(api, ["pull_a"])
    assert (await report(api, job, "snooze", seconds=30, reason="later")).status_code == 202
    await api.tick()
    shown = await api.job(posted["id"])
    assert shown["state"] == "scheduled"
    assert shown["attempt"] == 0
    api.clock.advance(31)
    await api.tick()
    [again] = await fetch(api, ["pull_a"])
    assert again["attempt"] == 1


async def test_heartbeat_moves_the_deadline_and_checkpoint_keeps_the_payload(api: Api) -> None:
    posted = await api.post_job(type="pull_b", payload={"step": 0})
    await api.tick("other")
    [job] = await fetch(api, ["pull_b"])
    api.clock.advance(10)
    beat = await report(api, job, "heartbeat", progress={"done": 5})
    assert beat.status_code == 202, beat.text
    assert beat.json()["attempt"] == 1
    kept = await report(api, job, "checkpoint", payload={"step": 5})
    assert kept.status_code == 202, kept.text
    await api.tick("other")
    shown = await api.job(posted["id"])
    assert shown["heartbeat"]["progress"] == {"done": 5}
    assert shown["payload"] == {"step": 5}
    # 20 s after the heartbeat (the type's heartbeat_timeout), not 24 h after the claim.
    api.clock.advance(21)
    await api.tick("other")
    shown = await api.job(posted["id"])
    assert shown["state"] == "scheduled"
    assert "timed out" in shown["attempts"][0]["error"]
    assert (await report(api, job, "heartbeat")).status_code == 409


async def test_a_timed_out_job_refuses_its_workers_report(api: Api) -> None:
    posted = await api.post_job(type="pull_a")
    await api.tick()
    [job] = await fetch(api, ["pull_a"])
    api.clock.advance(61)
    await api.tick()
    assert (await api.job(posted["id"]))["attempts"][0]["error"].startswith("timed out")
    late = await report(api, job, "complete", result=1)
    assert late.status_code == 409
    assert late.json()["error"] == "conflict"


async def test_the_queue_limit_holds_for_pull_workers(api: Api) -> None:
    for _ in range(5):
        await api.post_job(type="pull_a")
    await api.tick()
    # concurrency 2: a worker that asks for 10 gets 2.
    first = await fetch(api, ["pull_a"], count=10)
    assert len(first) == 2
    await api.tick()
    assert await fetch(api, ["pull_a"], count=10) == []
    for job in first:
        await report(api, job, "complete")
    await api.tick()
    assert len(await fetch(api, ["pull_a"], count=10)) == 2


async def test_a_waiting_fetch_answers_when_a_job_is_claimed(api: Api) -> None:
    waiting = asyncio.create_task(fetch(api, ["pull_a"], wait=30))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    posted = await api.post_job(type="pull_a")
    await api.tick()
    jobs = await asyncio.wait_for(waiting, 20)
    assert [j["id"] for j in jobs] == [posted["id"]]


async def test_a_waiting_fetch_ends_empty_after_its_wait(api: Api) -> None:
    assert await fetch(api, ["pull_a"], wait=0.3) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"types": []}, "types"),
        ({"types": ["nope"]}, "types[0]"),
        ({"types": ["typed"]}, "types[0]"),
        ({"types": ["pull_a"], "count": 0}, "count"),
        ({"types": ["pull_a"], "wait": 61}, "wait"),
        ({"types": ["pull_a"], "extra": 1}, "extra"),
    ],
)
async def test_bad_fetches_name_their_field(sqlite_url: str, body: dict, field: str) -> None:
    async with open_api(sqlite_url, job_types=PULL, queues=QUEUES) as api:
        response = await api.client.post("/v1/workers/fetch", json=body)
    assert response.status_code == 422, response.text
    assert field in str(response.json()), response.json()


async def test_bad_reports(sqlite_url: str) -> None:
    async with open_api(sqlite_url, job_types=PULL, queues=QUEUES) as api:
        await api.post_job(type="pull_a")
        await api.tick()
        [job] = await fetch(api, ["pull_a"])
        missing = await api.client.post("/v1/workers/jobs/99999/complete", json={"token": "x"})
        assert missing.status_code == 404
        wrong = await report(api, {**job, "token": "forged"}, "complete")
        assert wrong.status_code == 409
        assert wrong.json()["field"] == "token"
        no_token = await api.client.post(f"/v1/workers/jobs/{job['id']}/complete", json={})
        assert no_token.status_code == 422
        assert "token" in str(no_token.json())
        nul = await report(api, job, "complete", result="a\u0000b")
        assert nul.status_code == 422
        assert nul.json()["field"] == "result"
        negative = await report(api, job, "snooze", seconds=-1)
        assert negative.status_code == 422
        assert "seconds" in str(negative.json())
        not_object = await report(api, job, "checkpoint", payload=[1])
        assert not_object.status_code == 422
        assert "payload" in str(not_object.json())


async def test_concurrent_fetches_never_take_one_job_twice(api: Api) -> None:
    posted = [(await api.post_job(type="pull_b"))["id"] for _ in range(20)]
    await api.tick("other")
    taken = await asyncio.gather(*(fetch(api, ["pull_b"], count=7) for _ in range(4)))
    ids = [job["id"] for jobs in taken for job in jobs]
    assert sorted(ids) == sorted(posted)


def test_a_pull_type_takes_no_correlation_key(sqlite_url: str) -> None:
    from hipq.process.wiring import ServiceError
    from hipq.service import build_service
    from tests.support import make_settings

    bad = {"p": {"transport": "pull", "correlation_key": "{payload.x}"}}
    with pytest.raises(ServiceError, match=r"job_types\.p\.correlation_key"):
        build_service(make_settings(sqlite_url, job_types=bad))
