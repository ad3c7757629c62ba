"""Overlap buffer_one and cancel_other, and the backfilled label, on SQLite and
PostgreSQL: the scheduler driven tick by tick on a FakeClock."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from tests.api.conftest import Api, open_api
from tests.schedules.test_schedules_api import START, _create, _jobs
from tests.support import FakeClock


async def _fires(api: Api) -> list[tuple[str, str]]:
    response = await api.client.get("/v1/schedules/hourly/fires")
    assert response.status_code == 200, response.text
    fires = sorted(response.json()["fires"], key=lambda f: f["fire_time"])
    return [(f["fire_time"][11:13], f["outcome"]) for f in fires]


async def _at(api: Api, clock: FakeClock, hours: int) -> None:
    """The fire time ``hours`` after 09:00 (START is 09:30), then one scheduler tick."""
    clock.now = START + timedelta(hours=hours, minutes=-30)
    assert api.service.scheduler is not None
    await api.service.scheduler.run_once()


async def test_buffer_one_queues_one_job_behind_the_open_one_and_skips_the_rest(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        await _create(api, overlap="buffer_one")
        await _at(api, clock, 1)  # 10:00: a job
        await _at(api, clock, 2)  # 11:00: the 10:00 job is still scheduled: buffered
        await _at(api, clock, 3)  # 12:00: one waits already: skipped
        assert [j["run_at"][11:13] for j in await _jobs(api, "hourly")] == ["10"]
        assert await _fires(api) == [("10", "created"), ("11", "buffered"), ("12", "skipped")]
        await api.tick()  # the 10:00 job completes
        await _at(api, clock, 3)  # the buffered 11:00 fire time's job is made now
        jobs = await _jobs(api, "hourly")
        assert [(j["run_at"][11:13], j["state"]) for j in jobs] == [
            ("10", "completed"),
            ("11", "scheduled"),
        ]
        assert jobs[1]["labels"]["fire_time"] == "2026-03-02T11:00:00+00:00"
        assert await _fires(api) == [("10", "created"), ("11", "created"), ("12", "skipped")]
        await _at(api, clock, 4)  # 13:00: the 11:00 job is open: buffered again
        assert (await _fires(api))[-1] == ("13", "buffered")


async def test_cancel_other_cancels_a_scheduled_job_and_makes_the_new_one_at_once(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        await _create(api, overlap="cancel_other")
        await _at(api, clock, 1)
        await _at(api, clock, 2)
        jobs = await _jobs(api, "hourly")
        assert [(j["run_at"][11:13], j["state"]) for j in jobs] == [
            ("10", "cancelled"),
            ("11", "scheduled"),
        ]
        assert "cancel_other" in jobs[0]["last_error"]
        assert await _fires(api) == [("10", "created"), ("11", "created")]


async def test_cancel_other_waits_for_a_running_job_to_end_before_the_new_one(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        await _create(api, overlap="cancel_other", job={"type": "hang"})
        await _at(api, clock, 1)
        await api.tick()  # the 10:00 job runs (and hangs)
        assert (await _jobs(api, "hourly"))[0]["state"] == "running"
        await _at(api, clock, 2)  # 11:00: cancel asked of the running job; this one waits
        await _at(api, clock, 3)  # 12:00: still running: takes the waiting one's place
        assert await _fires(api) == [("10", "created"), ("11", "skipped"), ("12", "buffered")]
        assert len(await _jobs(api, "hourly")) == 1
        await api.tick()  # the loop cancels the running job
        await _at(api, clock, 3)
        jobs = await _jobs(api, "hourly")
        assert [(j["run_at"][11:13], j["state"]) for j in jobs] == [
            ("10", "cancelled"),
            ("12", "scheduled"),
        ]


async def test_catch_up_marks_the_jobs_it_makes_backfilled(database_url: str) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        await _create(api, catch_up="all")
        clock.now = START + timedelta(hours=4, minutes=30, seconds=20)  # 14:00:20
        assert api.service.scheduler is not None
        await api.service.scheduler.run_once()
        jobs = await _jobs(api, "hourly")
        marks = [(j["run_at"][11:13], j["labels"].get("backfilled")) for j in jobs]
        assert marks == [("10", "true"), ("11", "true"), ("12", "true"), ("13", "true"),
                         ("14", None)]  # fmt: skip
        backfilled = await api.client.get(
            "/v1/jobs", params={"label": ["schedule:hourly", "backfilled:true"]}
        )
        assert len(backfilled.json()["jobs"]) == 4


async def test_bad_overlap_and_a_backfilled_label_in_the_template_are_422(
    database_url: str,
) -> None:
    async with open_api(database_url) as api:
        bad: list[tuple[dict[str, Any], str]] = [
            ({"name": "a", "overlap": "queue"}, "overlap"),
            (
                {"name": "b", "job": {"type": "ok", "labels": {"backfilled": "no"}}},
                "job.labels.backfilled",
            ),
        ]
        for fields, where in bad:
            body = {"cron": "0 * * * *", "job": {"type": "ok"}, **fields}
            response = await api.client.post("/v1/schedules", json=body)
            assert response.status_code == 422, response.text
            assert where in response.text
        await _create(api)
        patched = await api.client.patch("/v1/schedules/hourly", json={"overlap": "later"})
        assert patched.status_code == 422 and "overlap" in patched.text
        await api.client.patch("/v1/schedules/hourly", json={"overlap": "cancel_other"})
        shown = await api.client.get("/v1/schedules/hourly")
        assert shown.json()["overlap"] == "cancel_other"


async def test_pause_on_failure_pauses_with_the_failed_job_and_resume_clears_it(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        created = await _create(api, pause_on_failure=True, job={"type": "permanent"})
        assert (created["pause_on_failure"], created["paused_reason"]) == (True, None)
        await _at(api, clock, 1)  # 10:00: a job, which fails for good
        await api.tick()
        failed = (await _jobs(api, "hourly"))[0]
        assert failed["state"] == "failed"
        await _at(api, clock, 2)  # the scheduler sees the failure: paused, no 11:00 job
        shown = (await api.client.get("/v1/schedules/hourly")).json()
        assert shown["paused"] is True and shown["next_fire_time"] is None
        assert shown["paused_reason"].startswith(f"job {failed['id']} failed: ")
        assert len(await _jobs(api, "hourly")) == 1
        page = await api.client.get("/dashboard/schedules")
        assert f"job {failed['id']} failed" in page.text
        resumed = await api.client.post("/v1/schedules/hourly/resume")
        assert (resumed.json()["paused"], resumed.json()["paused_reason"]) == (False, None)
        await _at(api, clock, 3)  # 12:00: fires again; the old failure pauses nothing
        assert len(await _jobs(api, "hourly")) == 2
        assert (await api.client.get("/v1/schedules/hourly")).json()["paused"] is False


async def test_pause_on_failure_ignores_a_job_that_completes(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        await _create(api, pause_on_failure=True)
        await _at(api, clock, 1)
        await api.tick()  # the ok job completes
        await _at(api, clock, 2)
        shown = (await api.client.get("/v1/schedules/hourly")).json()
        assert shown["paused"] is False
        assert len(await _jobs(api, "hourly")) == 2
        bad = await api.client.patch("/v1/schedules/hourly", json={"pause_on_failure": "maybe"})
        assert bad.status_code == 422 and "pause_on_failure" in bad.text


async def test_two_schedulers_cancel_once_and_release_once(database_url: str) -> None:
    if database_url.startswith("sqlite"):
        pytest.skip("one hipq process per SQLite file: several share PostgreSQL only")
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as one:
        await _create(one, overlap="cancel_other", job={"type": "hang"})
        await _at(one, clock, 1)
        await one.tick()  # the 10:00 job runs
        clock.now = START + timedelta(hours=2, minutes=-30)
        async with open_api(database_url, clock=clock) as two:
            a, b = one.service.scheduler, two.service.scheduler
            assert a is not None and b is not None
            await asyncio.gather(a.run_once(), b.run_once(), a.run_once(), b.run_once())
            assert await _fires(one) == [("10", "created"), ("11", "buffered")]
            await one.tick()  # the loop cancels the running job
            await asyncio.gather(a.run_once(), b.run_once(), a.run_once(), b.run_once())
            jobs = await _jobs(one, "hourly")
    assert [(j["run_at"][11:13], j["state"]) for j in jobs] == [
        ("10", "cancelled"),
        ("11", "scheduled"),
    ]
