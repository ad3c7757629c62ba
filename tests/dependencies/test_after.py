"""Jobs that wait for jobs (``after``), through the API on both engines: a fan-out
and its fan-in in one batch, release when all finished, cancel or run when one fails
for good, and the refusals (a cycle, an unknown id or key)."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Api


async def post_batch(api: Api, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answer = await api.client.post("/v1/jobs/batch", json={"jobs": jobs})
    assert answer.status_code == 201, answer.text
    return answer.json()["jobs"]


async def test_fan_out_and_fan_in_in_one_batch(api: Api) -> None:
    made = await post_batch(
        api,
        [
            {"type": "ok", "job_key": "part-1", "payload": {"n": 1}},
            {"type": "ok", "job_key": "part-2", "payload": {"n": 2}},
            {"type": "ok", "payload": {"sum": True}, "after": ["part-1", "part-2"]},
        ],
    )
    fan_in = await api.job(made[2]["id"])
    assert fan_in["state"] == "scheduled"
    assert fan_in["after"] == [made[0]["id"], made[1]["id"]]
    assert fan_in["waiting_for"] == 2
    assert f"waiting for jobs {made[0]['id']}, {made[1]['id']}" in fan_in["waiting_reason"]
    assert fan_in["run_at"] == made[0]["run_at"]  # its own, not the parked instant

    await api.tick()
    parts = [await api.job(m["id"]) for m in made[:2]]
    assert [p["state"] for p in parts] == ["completed", "completed"]
    await api.tick()
    fan_in = await api.job(made[2]["id"])
    assert fan_in["state"] == "completed", fan_in
    assert fan_in["waiting_for"] == 0 and fan_in["waiting_reason"] is None


async def test_a_failed_prerequisite_cancels_its_dependents_and_theirs(api: Api) -> None:
    first = await api.post_job(type="permanent")
    second = await api.post_job(type="ok", after=[first["id"]])
    third = await api.post_job(type="ok", after=[second["id"]])
    anyway = await api.post_job(type="ok", after=[first["id"]], after_failed="run")
    await api.tick()
    assert (await api.job(first["id"]))["state"] == "failed"
    second_now = await api.job(second["id"])
    assert second_now["state"] == "cancelled"
    assert second_now["last_error"] == f"job {first['id']} it runs after was failed"
    assert (await api.job(third["id"]))["state"] == "cancelled"
    await api.tick()
    assert (await api.job(anyway["id"]))["state"] == "completed"


async def test_after_a_finished_job(api: Api) -> None:
    done = await api.post_job(type="ok", job_key="done-before")
    await api.tick()
    assert (await api.job(done["id"]))["state"] == "completed"
    later = await api.post_job(type="ok", after=["done-before"])
    assert later["waiting_for"] is None and later["after"] == [done["id"]]
    await api.tick()
    assert (await api.job(later["id"]))["state"] == "completed"
    cancelled = await api.post_job(type="ok", run_in="1h")
    assert (await api.client.post(f"/v1/jobs/{cancelled['id']}/cancel")).status_code == 200
    refused = await api.post_job(type="ok", after=[cancelled["id"]])
    assert refused["state"] == "cancelled"


async def test_cancelling_a_prerequisite_by_hand_cancels_the_waiting_job(api: Api) -> None:
    first = await api.post_job(type="ok", run_in="1h")
    waiting = await api.post_job(type="ok", after=[first["id"]])
    assert (await api.client.post(f"/v1/jobs/{first['id']}/cancel")).status_code == 200
    assert (await api.job(waiting["id"]))["state"] == "cancelled"


async def test_refusals_name_the_field(api: Api) -> None:
    answer = await api.client.post("/v1/jobs", json={"type": "ok", "after": [999999]})
    assert answer.status_code == 422
    assert answer.json()["field"] == "after[0]"
    assert "job 999999 does not exist" in answer.json()["message"]

    answer = await api.client.post("/v1/jobs", json={"type": "ok", "after": ["no-such-key"]})
    assert answer.status_code == 422 and answer.json()["field"] == "after[0]"

    cycle = [
        {"type": "ok", "job_key": "a", "after": ["b"]},
        {"type": "ok", "job_key": "b", "after": ["a"]},
        {"type": "ok"},
    ]
    answer = await api.client.post("/v1/jobs/batch", json={"jobs": cycle})
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["field"] in ("jobs[0].after", "jobs[1].after")
    assert "a cycle" in body["message"] and "(a)" in body["message"] and "(b)" in body["message"]
    assert await api.count_jobs() == 0  # nothing of a refused batch is stored

    answer = await api.client.post(
        "/v1/jobs", json={"type": "ok", "after": [1], "after_failed": "maybe"}
    )
    assert answer.status_code == 422 and answer.json()["field"] == "after_failed"


async def test_a_waiting_job_keeps_waiting_when_its_run_at_is_changed(api: Api) -> None:
    first = await api.post_job(type="ok", run_in="1h")
    waiting = await api.post_job(type="ok", after=[first["id"]])
    answer = await api.client.patch(
        f"/v1/jobs/{waiting['id']}", json={"run_at": "2031-01-01T00:00:00Z"}
    )
    assert answer.status_code == 200, answer.text
    changed = answer.json()
    assert changed["run_at"].startswith("2031-01-01") and changed["waiting_for"] == 1
    assert changed["waiting_reason"].startswith("waiting for jobs")


async def test_the_dashboard_links_a_job_and_those_it_runs_after(api: Api) -> None:
    first = await api.post_job(type="ok", run_in="1h")
    waiting = await api.post_job(type="ok", after=[first["id"]], after_failed="run")
    page = (await api.client.get(f"/dashboard/jobs/{waiting['id']}")).text
    assert f'<a href="/dashboard/jobs/{first["id"]}">{first["id"]}</a>' in page
    assert "1 unfinished; if one fails: run" in page
    assert "waiting for jobs" in page
    page = (await api.client.get(f"/dashboard/jobs/{first['id']}")).text
    assert f'id="dependents"><a href="/dashboard/jobs/{waiting["id"]}">' in page
