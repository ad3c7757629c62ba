"""job_key as graphile-worker documents it after a failure, and ``unique_for``: one
job per key for a period, whatever its state (both engines, through the API)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hipq.store import InsertResult, JobFilter, Store
from tests.api.conftest import Api
from tests.verbs.test_job_keys import PARALLEL, T0, new


async def failed_once(api: Api, **fields: Any) -> dict[str, Any]:
    """A keyed job whose first attempt failed: scheduled again, attempt 1, an error."""
    job = await api.post_job(type="fail", job_key="k", **fields)
    await api.tick()
    again = await api.job(job["id"])
    assert again["state"] == "scheduled" and again["attempt"] == 1 and again["last_error"]
    return again


async def test_replace_after_a_failed_attempt_drops_its_error(api: Api) -> None:
    failed = await failed_once(api)
    replaced = await api.post_job(type="ok", job_key="k", payload={"v": 2})
    assert replaced["id"] == failed["id"]
    assert replaced["last_error"] is None and replaced["type"] == "ok"
    assert replaced["attempt"] == 1  # kept: it numbers the job's attempt history


async def test_preserve_run_at_keeps_run_at_only_before_the_first_attempt(api: Api) -> None:
    fresh = await api.post_job(type="ok", job_key="p", run_in="1h")
    kept = await api.post_job(type="ok", job_key="p", job_key_mode="preserve_run_at")
    assert kept["id"] == fresh["id"] and kept["run_at"] == fresh["run_at"]
    failed = await failed_once(api)  # its retry waits 10s
    moved = await api.post_job(
        type="fail", job_key="k", job_key_mode="preserve_run_at", run_in="2h"
    )
    assert moved["id"] == failed["id"]
    assert moved["run_at"] > failed["run_at"]  # the new run_at, as graphile-worker


async def test_unsafe_dedupe_returns_a_job_that_failed_for_good(api: Api) -> None:
    job = await api.post_job(type="permanent", job_key="d")
    await api.tick()
    assert (await api.job(job["id"]))["state"] == "failed"
    same = await api.post_job(type="ok", job_key="d", job_key_mode="unsafe_dedupe")
    assert same["id"] == job["id"] and same["state"] == "failed"
    # replace adds a new job: the failed one stays as the record of what happened.
    new = await api.post_job(type="ok", job_key="d")
    assert new["id"] != job["id"] and new["state"] == "scheduled"


async def test_unique_for_returns_the_first_job_whatever_its_state(api: Api) -> None:
    first = await api.post_job(type="ok", job_key="u", unique_for="1h", payload={"v": 1})
    await api.tick()
    assert (await api.job(first["id"]))["state"] == "completed"
    api.clock.advance(3599)
    again = await api.post_job(type="ok", job_key="u", unique_for="1h", payload={"v": 2})
    assert again["id"] == first["id"] and again["payload"] == {"v": 1}
    api.clock.advance(2)  # an hour after the first one's creation: a new job
    later = await api.post_job(type="ok", job_key="u", unique_for="1h", payload={"v": 3})
    assert later["id"] != first["id"] and later["payload"] == {"v": 3}
    assert await api.count_jobs() == 2


async def test_unique_for_an_open_job_is_not_replaced(api: Api) -> None:
    first = await api.post_job(type="ok", job_key="o", unique_for=600, run_in="1h")
    again = await api.post_job(type="ok", job_key="o", unique_for=600, payload={"v": 2})
    assert (
        again["id"] == first["id"] and again["payload"] == {} and again["run_at"] == first["run_at"]
    )


async def test_a_batch_with_unique_for(api: Api) -> None:
    body = {"jobs": [{"type": "ok", "job_key": "b", "unique_for": "1h"}] * 2}
    response = await api.client.post("/v1/jobs/batch", json=body)
    assert response.status_code == 201, response.text
    ids = [j["id"] for j in response.json()["jobs"]]
    assert ids[0] == ids[1]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"unique_for": "1h"}, "unique_for"),  # no job_key
        ({"job_key": "x", "unique_for": "soon"}, "unique_for"),
        ({"job_key": "x", "unique_for": 0}, "unique_for"),
        ({"job_key": "x", "unique_for": "3651d"}, "unique_for"),
        ({"job_key": "x", "job_key_mode": "keep"}, "job_key_mode"),
    ],
)
async def test_bad_unique_for(api: Api, fields: dict[str, Any], field: str) -> None:
    response = await api.client.post("/v1/jobs", json={"type": "ok", **fields})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == field, response.json()


async def test_concurrent_inserts_with_unique_for_become_one_job(store: Store) -> None:
    async def insert(v: int) -> InsertResult | Exception:
        job = new(job_key="busy", unique_for_seconds=3600.0, payload={"v": v})
        try:
            return await store.job_insert_many([job], T0)
        except Exception as exc:  # a 409 here is the defect this test is about
            return exc

    results = await asyncio.gather(*(insert(v) for v in range(PARALLEL)))
    assert [r for r in results if not isinstance(r, InsertResult)] == []
    assert len({j.id for r in results if isinstance(r, InsertResult) for j in r.jobs}) == 1
    assert len(await store.job_list(JobFilter())) == 1


async def test_an_embedded_service_takes_unique_for(api: Api) -> None:
    first = await api.service.add_job("ok", {}, job_key="e", unique_for="1h", run_in="1h")
    again = await api.service.add_job("ok", {"v": 2}, job_key="e", unique_for="1h")
    assert again.id == first.id and again.payload == {}
