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


async def report_many(api: Api, reports: list[dict]) -> list[dict]:
    response = await api.client.post("/v1/workers/reports", json={"reports": reports})
    assert response.status_code == 200, response.text
    return response.json()["results"]


async def test_many_outcomes_in_one_request(api: Api) -> None:
    ids = [(await api.post_job(type="pull_b", payload={"i": i}))["id"] for i in range(4)]
    await api.tick("other")
    done, failing, later, stale = sorted(await fetch(api, ["pull_b"]), key=lambda j: j["id"])
    results = await report_many(
        api,
        [
            {"id": done["id"], "token": done["token"], "outcome": "completed", "result": [1]},
            {"id": failing["id"], "token": failing["token"], "outcome": "failed",
             "error": "boom", "retryable": False, "traceback": "Traceback ..."},
            {"id": later["id"], "token": later["token"], "outcome": "snoozed", "seconds": 60},
            {"id": stale["id"], "token": "forged", "outcome": "completed"},
            {"id": 999_999, "token": "x", "outcome": "completed"},
        ],
    )  # fmt: skip
    assert [(r["id"], r["status"]) for r in results] == [
        (done["id"], "accepted"),
        (failing["id"], "accepted"),
        (later["id"], "accepted"),
        (stale["id"], "conflict"),
        (999_999, "not_found"),
    ]
    assert results[0]["attempt"] == 1
    assert (results[3]["field"], results[4]["field"]) == ("token", "id")
    await api.tick("other")
    shown = {i: await api.job(i) for i in ids}
    assert (shown[done["id"]]["state"], shown[done["id"]]["result"]) == ("completed", [1])
    assert shown[failing["id"]]["state"] == "failed"
    assert shown[failing["id"]]["attempts"][0]["traceback"] == "Traceback ..."
    assert (shown[later["id"]]["state"], shown[later["id"]]["attempt"]) == ("scheduled", 0)
    assert shown[stale["id"]]["state"] in ("running", "awaiting")  # the forged one did nothing


async def test_a_bad_report_in_a_batch_refuses_the_whole_request(api: Api) -> None:
    await api.post_job(type="pull_b")
    await api.tick("other")
    [job] = await fetch(api, ["pull_b"])
    good = {"id": job["id"], "token": job["token"], "outcome": "completed"}
    for bad, field in [
        ({**good, "result": "a\u0000b"}, "reports[1].result"),
        ({**good, "outcome": "exploded"}, "reports"),
        ({**good, "outcome": "snoozed", "seconds": -1}, "seconds"),
    ]:
        refused = await api.client.post("/v1/workers/reports", json={"reports": [good, bad]})
        assert refused.status_code == 422, refused.text
        assert field in str(refused.json()), refused.json()
    empty = await api.client.post("/v1/workers/reports", json={"reports": []})
    assert empty.status_code == 422
    # Nothing was taken: the claim still takes its one outcome.
    assert (await report(api, job, "complete", result="ok")).status_code == 202


async def test_a_claim_takes_one_outcome(api: Api) -> None:
    """A second, different outcome for one claim is refused at once (409) and changes
    nothing; the same report sent again (a lost answer) is accepted again."""
    first = await api.post_job(type="pull_a")
    second = await api.post_job(type="pull_a")
    await api.tick()
    one, two = sorted(await fetch(api, ["pull_a"]), key=lambda j: j["id"])
    # Snooze, then complete with the same token (both before the owner's tick).
    assert (await report(api, one, "snooze", seconds=30)).status_code == 202
    late = await report(api, one, "complete", result="done")
    assert late.status_code == 409, late.text
    assert late.json()["field"] == "token"
    assert (await report(api, one, "snooze", seconds=30)).status_code == 202  # the same again
    assert (await report(api, one, "heartbeat")).status_code == 409  # over for its worker
    # Complete, then fail.
    assert (await report(api, two, "complete", result="yes")).status_code == 202
    assert (await report(api, two, "fail", error="no")).status_code == 409
    [again] = await report_many(
        api, [{"id": two["id"], "token": two["token"], "outcome": "completed", "result": "no"}]
    )
    assert again["status"] == "conflict"
    await api.tick()
    snoozed, completed = await api.job(first["id"]), await api.job(second["id"])
    assert (snoozed["state"], snoozed["attempt"]) == ("scheduled", 0)
    assert (completed["state"], completed["result"]) == ("completed", "yes")
    assert len(completed["attempts"]) == 1


async def test_two_outcomes_for_one_claim_in_one_request(api: Api) -> None:
    await api.post_job(type="pull_b")
    await api.tick("other")
    [job] = await fetch(api, ["pull_b"])
    token = job["token"]
    results = await report_many(
        api,
        [
            {"id": job["id"], "token": token, "outcome": "completed", "result": 1},
            {"id": job["id"], "token": token, "outcome": "completed", "result": 1},
            {"id": job["id"], "token": token, "outcome": "completed", "result": 2},
        ],
    )
    assert [r["status"] for r in results] == ["accepted", "accepted", "conflict"]
    await api.tick("other")
    assert (await api.job(job["id"]))["result"] == 1


async def test_pull_keys_cannot_be_guessed_given_or_called_back(api: Api) -> None:
    posted = await api.post_job(type="pull_b")
    # A callback for the key the job would have had (id and attempt) waits for nothing.
    guess = f"hipq-pull:{posted['id']}:1"
    assert (await api.client.post(f"/v1/callbacks/{guess}", json={"x": 1})).status_code == 202
    await api.tick("other")
    [job] = await fetch(api, ["pull_b"])
    key = (await api.job(job["id"]))["correlation_key"]
    assert key.startswith("hipq-pull:") and key != guess and len(key) > 30
    # Even the real key, read from the job, settles nothing through the callback route.
    called = await api.client.post(f"/v1/callbacks/{key}", json={"status": "ok"})
    assert called.status_code == 202, called.text
    beat = await api.client.post(f"/v1/callbacks/{key}/heartbeat?type=pull_b")
    absent = await api.client.post("/v1/callbacks/no-such-key/heartbeat?type=pull_b")
    assert (beat.status_code, absent.status_code) == (404, 404)
    await api.tick("other")
    assert (await api.job(job["id"]))["state"] in ("running", "awaiting")
    assert (await report(api, job, "complete", result="mine")).status_code == 202
    await api.tick("other")
    assert (await api.job(job["id"]))["result"] == "mine"
    # A caller may not give a key of that form to a job of its own.
    taken = await api.client.post(
        "/v1/jobs", json={"type": "pull_b", "correlation_key": f"hipq-pull:{job['id']}:2"}
    )
    assert taken.status_code == 422, taken.text
    assert taken.json()["field"] == "correlation_key"


async def test_a_fetch_takes_no_more_weight_than_asked(api: Api) -> None:
    heavy = (await api.post_job(type="pull_b", weight=3))["id"]
    light = [(await api.post_job(type="pull_b", weight=1))["id"] for _ in range(3)]
    await api.tick("other")
    taken = await api.client.post(
        "/v1/workers/fetch", json={"types": ["pull_b"], "count": 10, "weight": 2}
    )
    assert taken.status_code == 200, taken.text
    assert [j["id"] for j in taken.json()["jobs"]] == light[:2]  # the heavy one is left
    [rest] = await fetch(api, ["pull_b"], count=1)
    assert rest["id"] == heavy
    refused = await api.client.post("/v1/workers/fetch", json={"types": ["pull_b"], "weight": 0})
    assert refused.status_code == 422 and "weight" in refused.text
