"""Waits made across requests, on both engines: every way of closing a cycle is refused
with a 422 naming ``after`` and nothing written (a job_key replace that waits for
itself or for a job that waits for it, a job that joins a batch and waits for the
batch's completion job, two batches crossed); and a job that waits keeps waiting when
an operator reschedules or retries it, by itself or in bulk."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Api


async def post(api: Api, path: str, body: Any = None, status: int = 201) -> dict[str, Any]:
    answer = await api.client.post(path, json=body)
    assert answer.status_code == status, answer.text
    return answer.json()


def refused_as_cycle(body: dict[str, Any], field: str = "after") -> None:
    assert body["field"] == field, body
    assert "a cycle" in body["message"], body


async def test_a_replace_that_waits_for_itself_is_refused(api: Api) -> None:
    job = await api.post_job(type="ok", job_key="cyc-self", run_in="1h")
    body = await post(
        api, "/v1/jobs", {"type": "ok", "job_key": "cyc-self", "after": [job["id"]]}, 422
    )
    refused_as_cycle(body)
    body = await post(
        api, "/v1/jobs", {"type": "ok", "job_key": "cyc-self", "after": ["cyc-self"]}, 422
    )
    refused_as_cycle(body)
    same = await api.job(job["id"])
    assert (same["after"], same["waiting_for"], same["run_at"]) == (None, None, job["run_at"])
    assert await api.count_jobs() == 1


async def test_a_replace_that_waits_for_its_own_dependent_is_refused(api: Api) -> None:
    a = await api.post_job(type="ok", job_key="cyc-a", run_in="1h")
    b = await api.post_job(type="ok", job_key="cyc-b", after=["cyc-a"])
    body = await post(api, "/v1/jobs", {"type": "ok", "job_key": "cyc-a", "after": ["cyc-b"]}, 422)
    refused_as_cycle(body)
    # In a batch request the field names the job.
    body = await post(
        api,
        "/v1/jobs/batch",
        {"jobs": [{"type": "ok"}, {"type": "ok", "job_key": "cyc-a", "after": [b["id"]]}]},
        422,
    )
    refused_as_cycle(body, "jobs[1].after")
    assert (await api.job(a["id"]))["after"] is None
    assert await api.count_jobs() == 2
    # A replace that waits for a job that does not wait for it is taken.
    other = await api.post_job(type="ok", run_in="1h")
    replaced = await post(
        api, "/v1/jobs", {"type": "ok", "job_key": "cyc-a", "after": [other["id"]]}
    )
    assert replaced["id"] == a["id"] and (await api.job(a["id"]))["waiting_for"] == 1


async def test_a_job_that_joins_a_batch_and_waits_for_its_completion_is_refused(
    api: Api,
) -> None:
    made = await post(api, "/v1/batches", {"on_complete": {"type": "record"}})
    completion = (await api.client.get(f"/v1/batches/{made['id']}")).json()["completion_job_id"]
    body = await post(
        api, "/v1/jobs", {"type": "ok", "batch_id": made["id"], "after": [completion]}, 422
    )
    refused_as_cycle(body)
    batch = (await api.client.get(f"/v1/batches/{made['id']}")).json()
    assert batch["total"] == 0 and await api.count_jobs() == 1


async def test_two_batches_crossed_are_refused(api: Api) -> None:
    one = await post(api, "/v1/batches", {"on_complete": {"type": "record"}})
    two = await post(api, "/v1/batches", {"on_complete": {"type": "record"}})
    done = []
    for made in (one, two):
        done.append((await api.client.get(f"/v1/batches/{made['id']}")).json()["completion_job_id"])
    await post(api, "/v1/jobs", {"type": "ok", "batch_id": one["id"], "after": [done[1]]})
    body = await post(
        api,
        "/v1/jobs/batch",
        {"jobs": [{"type": "ok"}, {"type": "ok", "batch_id": two["id"], "after": [done[0]]}]},
        422,
    )
    refused_as_cycle(body, "jobs[1].after")
    assert (await api.client.get(f"/v1/batches/{two['id']}")).json()["total"] == 0
    assert await api.count_jobs() == 3  # two completion jobs and the first join


async def test_a_waiting_job_rescheduled_or_retried_keeps_waiting(api: Api) -> None:
    first = await api.post_job(type="ok", run_in="1h")
    waiting = await api.post_job(type="ok", job_key="waits", after=[first["id"]])
    answer = await post(api, f"/v1/jobs/{waiting['id']}/reschedule", {}, 200)
    assert (answer["state"], answer["waiting_for"]) == ("scheduled", 1)
    assert answer["waiting_reason"].startswith("waiting for jobs")
    await api.tick()
    assert (await api.job(waiting["id"]))["state"] == "scheduled"

    # Cancelled by hand while it waited, then retried: it waits again.
    await post(api, f"/v1/jobs/{waiting['id']}/cancel", None, 200)
    again = await post(api, f"/v1/jobs/{waiting['id']}/retry", {}, 200)
    assert (again["state"], again["waiting_for"]) == ("scheduled", 1)
    # In bulk too.
    answer = await api.client.post(
        "/v1/jobs/bulk", json={"action": "reschedule", "filter": {"job_key": "waits"}}
    )
    assert answer.status_code == 202, answer.text
    while (await api.client.get(f"/v1/jobs/bulk/{answer.json()['id']}")).json()[
        "state"
    ] == "running":
        await api.service.bulk.run_once()
    assert (await api.job(waiting["id"]))["waiting_for"] == 1
    await api.tick()
    assert (await api.job(waiting["id"]))["state"] == "scheduled"

    # Once what it waits for has ended, it runs.
    await post(api, f"/v1/jobs/{first['id']}/reschedule", {}, 200)
    await api.tick()
    await api.tick()
    assert (await api.job(first["id"]))["state"] == "completed"
    assert (await api.job(waiting["id"]))["state"] == "completed"


async def test_a_replace_replaces_what_a_job_waits_for(api: Api) -> None:
    first = await api.post_job(type="ok", run_in="1h")
    second = await api.post_job(type="ok", run_in="1h")
    waiting = await api.post_job(type="ok", job_key="w", after=[first["id"]])
    await post(api, "/v1/jobs", {"type": "ok", "job_key": "w", "after": [second["id"]]})
    replaced = await api.job(waiting["id"])
    assert (replaced["after"], replaced["waiting_for"]) == ([second["id"]], 1)
    await post(api, f"/v1/jobs/{first['id']}/cancel", None, 200)
    assert (await api.job(waiting["id"]))["state"] == "scheduled"

    # Replaced without after (its run_at kept), it waits for nothing and runs.
    body = {"type": "ok", "job_key": "w", "job_key_mode": "preserve_run_at"}
    await post(api, "/v1/jobs", body)
    await api.tick()
    assert (await api.job(waiting["id"]))["state"] == "completed"
    assert (await api.job(second["id"]))["state"] == "scheduled"
