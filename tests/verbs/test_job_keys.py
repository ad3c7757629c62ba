"""job_key as graphile-worker documents it: one job per key however many first inserts
race, the three modes, a running job whose key was taken over, lookup and cancel by key."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from hipq.jobs import NewJob
from hipq.store import InsertResult, JobFilter, Store
from tests.api.conftest import Api

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

PARALLEL = 20


def new(**fields: Any) -> NewJob:
    base: dict[str, Any] = {"type": "ok", "queue": "default", "payload": {}, "run_at": T0}
    return NewJob(**{**base, **fields})


async def test_concurrent_first_inserts_of_one_key_become_one_job(api: Api) -> None:
    async def post(v: int) -> tuple[int, dict]:
        body = {"type": "ok", "job_key": "fresh", "payload": {"v": v}}
        response = await api.client.post("/v1/jobs", json=body)
        return response.status_code, response.json()

    answers = await asyncio.gather(*(post(v) for v in range(PARALLEL)))
    assert sorted({code for code, _ in answers}) == [201], answers
    assert len({body["id"] for _, body in answers}) == 1
    assert await api.count_jobs() == 1


async def test_concurrent_first_inserts_in_separate_transactions(store: Store) -> None:
    # Each insert its own transaction, as POSTs from several hipq processes are.
    async def insert(v: int) -> InsertResult | Exception:
        try:
            return await store.job_insert_many([new(job_key="fresh", payload={"v": v})], T0)
        except Exception as exc:  # a 409 here is the defect this test is about
            return exc

    results = await asyncio.gather(*(insert(v) for v in range(PARALLEL)))
    assert [r for r in results if not isinstance(r, InsertResult)] == []
    ids = {j.id for r in results if isinstance(r, InsertResult) for j in r.jobs}
    assert len(ids) == 1
    assert len(await store.job_list(JobFilter())) == 1


async def test_a_running_job_whose_key_was_taken_over_is_not_retried(api: Api) -> None:
    old = await api.post_job(type="hang", job_key="nightly", timeout="60s")
    await api.tick()
    assert (await api.job(old["id"]))["state"] == "running"
    new_job = await api.post_job(type="hang", job_key="nightly", timeout="60s")
    assert new_job["id"] != old["id"]
    taken = await api.job(old["id"])
    assert taken["job_key"] is None
    api.clock.advance(61)  # the old attempt times out: it would be retried (max 3)
    await api.tick()
    ended = await api.job(old["id"])
    assert ended["state"] == "failed", ended
    assert (await api.job(new_job["id"]))["job_key"] == "nightly"


async def test_look_up_and_cancel_by_key(api: Api) -> None:
    job = await api.post_job(type="ok", job_key="report/2026-11", run_in="1h")
    found = await api.client.get("/v1/jobs/by-key/report%2F2026-11")
    assert found.status_code == 200 and found.json()["id"] == job["id"]
    listed = await api.client.get("/v1/jobs", params={"job_key": "report/2026-11"})
    assert [j["id"] for j in listed.json()["jobs"]] == [job["id"]]
    cancelled = await api.client.post("/v1/jobs/by-key/report%2F2026-11/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    gone = await api.client.get("/v1/jobs/by-key/report%2F2026-11")
    assert gone.status_code == 404 and gone.json()["field"] == "job_key"
