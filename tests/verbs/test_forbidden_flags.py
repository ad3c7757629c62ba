"""Forbidden flags, on both engines: jobs carry flags; an operator forbids flags on a
queue at run time; jobs with a forbidden flag wait with that reason; the setting is
stored with the queue (every process, every restart)."""

from __future__ import annotations

from tests.api.conftest import Api, open_api


async def forbid(api: Api, queue: str, flags: list[str]) -> dict:
    answer = await api.client.put(f"/v1/queues/{queue}/forbidden-flags", json={"flags": flags})
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_a_forbidden_flag_holds_its_jobs_with_the_reason(api: Api) -> None:
    partner = await api.post_job(type="ok", flags=["partner-x", "nightly"])
    other = await api.post_job(type="ok", flags=["partner-y"])
    plain = await api.post_job(type="ok")
    assert partner["flags"] == ["nightly", "partner-x"]
    queue = await forbid(api, "default", ["partner-x"])
    assert queue["forbidden_flags"] == ["partner-x"]
    await api.tick()
    held = await api.job(partner["id"])
    assert held["state"] == "scheduled"
    assert held["waiting_reason"] == "flag partner-x is forbidden on queue default"
    assert (await api.job(other["id"]))["state"] == "completed"
    assert (await api.job(plain["id"]))["state"] == "completed"
    shown = (await api.client.get("/v1/queues/default")).json()
    assert shown["held_by"] == {"forbidden_flags": 1}
    await forbid(api, "default", [])  # allowed again
    await api.tick()
    assert (await api.job(partner["id"]))["state"] == "completed"


async def test_the_setting_survives_a_restart(database_url: str) -> None:
    async with open_api(database_url) as api:
        await forbid(api, "default", ["maintenance"])
    async with open_api(database_url) as api:  # a new process on the same database
        job = await api.post_job(type="ok", flags=["maintenance"])
        await api.tick()
        held = await api.job(job["id"])
        assert held["state"] == "scheduled" and "maintenance" in held["waiting_reason"]
        queue = (await api.client.get("/v1/queues/default")).json()
        assert queue["forbidden_flags"] == ["maintenance"]


async def test_bad_flags_are_refused(sqlite_api: Api) -> None:
    for body, field in (
        ({"flags": [""]}, "flags[0]"),
        ({"flags": ["a\nb"]}, "flags[0]"),
        ({"flags": "x"}, "flags"),
    ):
        answer = await sqlite_api.client.put("/v1/queues/default/forbidden-flags", json=body)
        assert answer.status_code == 422 and answer.json()["field"] == field, answer.text
    unknown = await sqlite_api.client.put("/v1/queues/nope/forbidden-flags", json={"flags": []})
    assert unknown.status_code == 404
    job = await sqlite_api.client.post("/v1/jobs", json={"type": "ok", "flags": [7]})
    assert job.status_code == 422 and job.json()["field"] == "flags[0]"
