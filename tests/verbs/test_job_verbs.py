"""The operator's verbs on one job, through the API, on both engines: a scheduled or
finished job changes at once; a job in flight is changed by its queue's loop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.api.conftest import Api

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # the FakeClock's start


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def running(api: Api, **fields: object) -> dict:
    job = await api.post_job(type="hang", **fields)
    await api.tick()
    assert (await api.job(job["id"]))["state"] == "running"
    return job


async def test_complete_a_scheduled_job_at_once(api: Api) -> None:
    job = await api.post_job(type="ok", run_at=(NOW + timedelta(hours=1)).isoformat())
    answer = await api.client.post(f"/v1/jobs/{job['id']}/complete", json={"result": {"n": 7}})
    assert answer.status_code == 200, answer.text
    done = await api.job(job["id"])
    assert done["state"] == "completed" and done["result"] == {"n": 7}
    again = await api.client.post(f"/v1/jobs/{job['id']}/complete", json={})
    assert again.status_code == 409 and again.json()["field"] == "state"


async def test_complete_a_running_job_by_its_loop(api: Api) -> None:
    job = await running(api)
    answer = await api.client.post(f"/v1/jobs/{job['id']}/complete", json={"result": "by hand"})
    assert answer.status_code == 202 and answer.json()["state"] == "running"
    await api.tick()
    done = await api.job(job["id"])
    assert done["state"] == "completed" and done["result"] == "by hand"
    assert [a["outcome"] for a in done["attempts"]] == ["completed"]


async def test_fail_a_running_job_for_good(api: Api) -> None:
    job = await running(api)
    answer = await api.client.post(f"/v1/jobs/{job['id']}/fail", json={"reason": "bad order"})
    assert answer.status_code == 202
    await api.tick()
    failed = await api.job(job["id"])
    assert failed["state"] == "failed" and failed["last_error"] == "bad order"


async def test_fail_needs_a_reason(api: Api) -> None:
    job = await api.post_job(type="ok")
    answer = await api.client.post(f"/v1/jobs/{job['id']}/fail", json={})
    assert answer.status_code == 422 and "reason" in answer.text
    assert (await api.job(job["id"]))["state"] == "scheduled"


async def test_reschedule_a_running_job(api: Api) -> None:
    job = await running(api)
    later = NOW + timedelta(hours=2)
    body = {"run_at": later.isoformat(), "priority": 3, "reset_attempts": True, "max_attempts": 9}
    answer = await api.client.post(f"/v1/jobs/{job['id']}/reschedule", json=body)
    assert answer.status_code == 202
    await api.tick()
    moved = await api.job(job["id"])
    assert moved["state"] == "scheduled" and at(moved["run_at"]) == later
    assert moved["priority"] == 3 and moved["attempt"] == 0
    assert moved["retry"]["max_attempts"] == 9
    assert [a["outcome"] for a in moved["attempts"]] == ["rescheduled"]


async def test_reschedule_a_failed_job_with_run_in(api: Api) -> None:
    job = await api.post_job(type="permanent")
    await api.tick()
    assert (await api.job(job["id"]))["state"] == "failed"
    answer = await api.client.post(
        f"/v1/jobs/{job['id']}/reschedule", json={"run_in": "10m", "max_attempts": 5}
    )
    assert answer.status_code == 200, answer.text
    again = answer.json()
    assert again["state"] == "scheduled" and at(again["run_at"]) == NOW + timedelta(minutes=10)
    assert again["retry"]["max_attempts"] == 5


async def test_reschedule_validates_a_changed_retry_as_a_new_one(api: Api) -> None:
    # "none" takes max_attempts 1 only: 2 used to be stored, a retry that does not load
    # (each failure then logged a traceback and fell back to exponential, 25 attempts).
    job = await api.post_job(type="permanent", retry={"strategy": "none"})
    await api.tick()
    before = await api.job(job["id"])
    assert before["state"] == "failed"
    answer = await api.client.post(
        f"/v1/jobs/{job['id']}/reschedule", json={"run_in": "10m", "max_attempts": 2}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "max_attempts"
    assert "none" in answer.json()["message"]
    after = await api.job(job["id"])
    assert (after["state"], after["retry"]) == ("failed", before["retry"])  # nothing written
    answer = await api.client.post(f"/v1/jobs/{job['id']}/reschedule", json={"max_attempts": 1})
    assert answer.status_code == 200, answer.text
    assert answer.json()["retry"] == {"strategy": "none", "max_attempts": 1}


async def test_reschedule_of_a_running_job_validates_its_retry_before_asking_the_loop(
    api: Api,
) -> None:
    job = await running(api, retry={"strategy": "none"})
    answer = await api.client.post(f"/v1/jobs/{job['id']}/reschedule", json={"max_attempts": 3})
    assert answer.status_code == 422 and answer.json()["field"] == "max_attempts"
    await api.tick()
    still = await api.job(job["id"])
    assert still["state"] == "running" and still["retry"]["strategy"] == "none"


async def test_reschedule_refuses_run_at_with_run_in(api: Api) -> None:
    job = await api.post_job(type="ok")
    body = {"run_in": 5, "run_at": NOW.isoformat()}
    answer = await api.client.post(f"/v1/jobs/{job['id']}/reschedule", json=body)
    assert answer.status_code == 422 and answer.json()["field"] == "run_in"


async def test_delete_only_finished_jobs(api: Api) -> None:
    job = await api.post_job(type="ok")
    refused = await api.client.delete(f"/v1/jobs/{job['id']}")
    assert refused.status_code == 409 and "cancel it first" in refused.text
    await api.tick()
    assert (await api.client.delete(f"/v1/jobs/{job['id']}")).status_code == 200
    assert (await api.client.get(f"/v1/jobs/{job['id']}")).status_code == 404
    assert (await api.client.delete(f"/v1/jobs/{job['id']}")).status_code == 404


async def test_cancel_with_a_reason(api: Api) -> None:
    job = await running(api)
    answer = await api.client.post(f"/v1/jobs/{job['id']}/cancel", json={"reason": "not needed"})
    assert answer.status_code == 202
    await api.tick()
    cancelled = await api.job(job["id"])
    assert cancelled["state"] == "cancelled" and cancelled["last_error"] == "not needed"


async def test_a_later_request_replaces_an_earlier_one(api: Api) -> None:
    job = await running(api)
    await api.client.post(f"/v1/jobs/{job['id']}/fail", json={"reason": "first thought"})
    await api.client.post(f"/v1/jobs/{job['id']}/complete", json={"result": {"by": "hand"}})
    await api.tick()
    assert (await api.job(job["id"]))["state"] == "completed"


async def test_post_with_run_in(api: Api) -> None:
    job = await api.post_job(type="ok", run_in="90s")
    assert at(job["run_at"]) == NOW + timedelta(seconds=90)
    both = await api.client.post(
        "/v1/jobs", json={"type": "ok", "run_in": 1, "run_at": NOW.isoformat()}
    )
    assert both.status_code == 422 and both.json()["field"] == "run_in"
