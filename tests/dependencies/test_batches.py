"""Batches with a completion, through the API on both engines: the counts an operator
reads, the completion job that runs once with them, and the refusals."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Api, open_api
from tests.notifications.conftest import Receiver, notify_settings


async def batch(api: Api, batch_id: int) -> dict[str, Any]:
    answer = await api.client.get(f"/v1/batches/{batch_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_a_batch_counts_its_jobs_and_completes_once(api: Api) -> None:
    body = {
        "jobs": [
            {"type": "ok", "payload": {"n": 1}},
            {"type": "ok", "payload": {"n": 2}},
            {"type": "permanent"},
            {"type": "ok", "run_in": "1h"},
        ],
        "batch": {"on_complete": {"type": "record", "payload": {"report": "nightly"}}},
    }
    answer = await api.client.post("/v1/jobs/batch", json=body)
    assert answer.status_code == 201, answer.text
    batch_id = answer.json()["batch_id"]
    made = [j["id"] for j in answer.json()["jobs"]]
    assert (await api.job(made[0]))["batch_id"] == batch_id
    counts = await batch(api, batch_id)
    assert (counts["total"], counts["pending"], counts["finished_at"]) == (4, 4, None)
    assert counts["status"] == "sealed" and counts["sealed_at"] is not None
    completion = counts["completion_job_id"]
    waiting = await api.job(completion)
    assert (waiting["waiting_for"], waiting["waiting_reason"]) == (
        1,
        f"waits for batch {batch_id} to finish",
    )

    await api.tick()
    counts = await batch(api, batch_id)
    assert (counts["completed"], counts["failed"], counts["pending"]) == (2, 1, 1)
    assert (await api.job(completion))["state"] == "scheduled"

    assert (await api.client.post(f"/v1/jobs/{made[3]}/cancel")).status_code == 200
    counts = await batch(api, batch_id)
    assert (counts["pending"], counts["cancelled"]) == (0, 1)
    assert counts["finished_at"] is not None
    await api.tick()
    done = await api.job(completion)
    assert done["state"] == "completed", done
    assert done["payload"] == {
        "report": "nightly",
        "batch": {"id": batch_id, "total": 4, "completed": 2, "failed": 1, "cancelled": 1},
    }

    # A job of the batch retried by an operator counts once, and the completion job
    # does not run again.
    assert (await api.client.post(f"/v1/jobs/{made[2]}/retry")).status_code == 200
    counts = await batch(api, batch_id)
    assert (counts["pending"], counts["failed"]) == (1, 0)
    await api.tick()
    counts = await batch(api, batch_id)
    assert (counts["pending"], counts["failed"]) == (0, 1)
    assert (await api.job(completion))["attempt"] == 1


async def test_a_batch_without_completion_and_the_refusals(api: Api) -> None:
    answer = await api.client.post("/v1/jobs/batch", json={"jobs": [{"type": "ok"}], "batch": {}})
    assert answer.status_code == 201, answer.text
    counts = await batch(api, answer.json()["batch_id"])
    assert counts["completion_job_id"] is None and counts["total"] == 1

    answer = await api.client.get("/v1/batches/999999")
    assert answer.status_code == 404
    bad = {"jobs": [{"type": "ok"}], "batch": {"on_complete": {"type": "nope"}}}
    answer = await api.client.post("/v1/jobs/batch", json=bad)
    assert answer.status_code == 422 and answer.json()["field"] == "batch.on_complete.type"
    bad = {"jobs": [{"type": "ok"}], "batch": {"notify": ["x"]}}
    answer = await api.client.post("/v1/jobs/batch", json=bad)
    assert answer.status_code == 422 and answer.json()["field"] == "batch.notify[0]"


async def test_the_job_page_shows_its_batch(api: Api) -> None:
    body = {
        "jobs": [{"type": "ok", "run_in": "1h"}, {"type": "ok", "run_in": "1h"}],
        "batch": {"on_complete": {"type": "ok"}},
    }
    answer = await api.client.post("/v1/jobs/batch", json=body)
    batch_id, first = answer.json()["batch_id"], answer.json()["jobs"][0]["id"]
    completion = (await batch(api, batch_id))["completion_job_id"]
    page = (await api.client.get(f"/dashboard/jobs/{first}")).text
    assert f'<a href="/dashboard/batches/{batch_id}">{batch_id}</a> (sealed): 2 pending' in page
    assert "0 completed, 0 failed, 0 cancelled of 2" in page
    assert f'<a href="/dashboard/jobs/{completion}">{completion}</a> (ok)' in page


async def test_the_batch_notify_targets_hear_of_its_finish_once(database_url: str) -> None:
    receiver = Receiver()
    async with receiver.up(), open_api(database_url, **notify_settings(receiver)) as api:
        body = {
            "jobs": [{"type": "ok", "notify": []}, {"type": "permanent", "notify": []}],
            "batch": {"notify": ["hook"]},
        }
        answer = await api.client.post("/v1/jobs/batch", json=body)
        assert answer.status_code == 201, answer.text
        batch_id = answer.json()["batch_id"]
        assert (await batch(api, batch_id))["completion_job_id"] is None
        await api.tick()
        await api.tick()
        await api.service.notifier.run_once()
        [told] = receiver.accepted()
        assert told["body"]["type"] == "batch.finished"
        data = told["body"]["data"]
        assert (data["batch_id"], data["total"], data["completed"], data["failed"]) == (
            batch_id,
            2,
            1,
            1,
        )
        listed = (await api.client.get("/v1/notifications")).json()["notifications"]
        assert [(n["batch_id"], n["job_id"], n["job_state"]) for n in listed] == [
            (batch_id, None, "finished")
        ]
        # A retried job that ends again does not finish the batch a second time.
        failed = answer.json()["jobs"][1]["id"]
        assert (await api.client.post(f"/v1/jobs/{failed}/retry")).status_code == 200
        await api.tick()
        await api.service.notifier.run_once()
        assert len(receiver.accepted()) == 1
