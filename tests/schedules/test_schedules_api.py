"""/v1/schedules on SQLite and PostgreSQL: the scheduler driven tick by tick on a
FakeClock (``service.scheduler.run_once``), never waiting in real time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.api.conftest import Api, open_api
from tests.support import FakeClock

START = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
HOURLY = {
    "name": "hourly",
    "cron": "0 * * * *",
    "job": {"type": "ok", "payload": {"at": "{fire.time}"}},
}


async def _jobs(api: Api, schedule: str) -> list[dict[str, Any]]:
    response = await api.client.get(
        "/v1/jobs", params={"label": f"schedule:{schedule}", "limit": 500}
    )
    assert response.status_code == 200, response.text
    return sorted(response.json()["jobs"], key=lambda j: j["run_at"])


async def _create(api: Api, **fields: Any) -> dict[str, Any]:
    response = await api.client.post("/v1/schedules", json={**HOURLY, **fields})
    assert response.status_code == 201, response.text
    return response.json()


async def test_a_schedule_fires_one_job_per_fire_time_with_the_fire_time_on_it(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        fired: list[dict[str, Any]] = []
        api.service.events.subscribe(
            lambda n, f: fired.append(f) if n == "schedule_fired" else None
        )
        created = await _create(api)
        assert created["next_fire_time"] == "2026-03-02T10:00:00Z"
        assert created["source"] == "api"
        scheduler = api.service.scheduler
        assert scheduler is not None
        assert await scheduler.run_once() == []  # nothing due yet
        clock.now = START + timedelta(minutes=30, seconds=2)
        await scheduler.run_once()
        await scheduler.run_once()  # the same fire time again: nothing more
        clock.now = START + timedelta(hours=1, minutes=30)
        await scheduler.run_once()
        jobs = await _jobs(api, "hourly")
        assert [j["run_at"] for j in jobs] == ["2026-03-02T10:00:00Z", "2026-03-02T11:00:00Z"]
        assert jobs[0]["payload"] == {"at": "2026-03-02T10:00:00+00:00"}
        assert jobs[0]["labels"] == {"schedule": "hourly", "fire_time": "2026-03-02T10:00:00+00:00"}
        assert jobs[0]["priority"] == 100  # the job type's defaults, as a POST gets them
        assert [f["job_id"] for f in fired] == [j["id"] for j in jobs]
        assert {f["schedule"] for f in fired} == {"hourly"}
        fires = (await api.client.get("/v1/schedules/hourly/fires")).json()["fires"]
        assert [f["job_id"] for f in fires] == [jobs[1]["id"], jobs[0]["id"]]


async def test_list_get_next_change_pause_resume_run_now_delete(database_url: str) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        await _create(api, timezone="Europe/Berlin", cron="0 2 * * *")
        listed = (await api.client.get("/v1/schedules")).json()["schedules"]
        assert [s["name"] for s in listed] == ["hourly"]
        nxt = (await api.client.get("/v1/schedules/hourly/next", params={"count": 3})).json()
        assert nxt["fire_times"] == [
            "2026-03-03T01:00:00Z",
            "2026-03-04T01:00:00Z",
            "2026-03-05T01:00:00Z",
        ]
        changed = await api.client.patch("/v1/schedules/hourly", json={"cron": "15 3 * * *"})
        assert changed.status_code == 200, changed.text
        assert changed.json()["next_fire_time"] == "2026-03-03T02:15:00Z"
        paused = (await api.client.post("/v1/schedules/hourly/pause")).json()
        assert paused["paused"] is True and paused["next_fire_time"] is None
        clock.now = START + timedelta(days=2)
        assert await api.service.scheduler.run_once() == []  # type: ignore[union-attr]
        run = await api.client.post("/v1/schedules/hourly/run")  # paused or not
        assert run.status_code == 201, run.text
        assert run.json()["job"]["labels"]["schedule"] == "hourly"
        resumed = (await api.client.post("/v1/schedules/hourly/resume")).json()
        assert resumed["paused"] is False
        await api.service.scheduler.run_once()  # type: ignore[union-attr]
        # What fell due while paused was not caught up: only the run-now job exists.
        assert len(await _jobs(api, "hourly")) == 1
        assert (await api.client.delete("/v1/schedules/hourly")).status_code == 204
        gone = await api.client.get("/v1/schedules/hourly")
        assert gone.status_code == 404 and gone.json()["field"] == "name"
        assert len(await _jobs(api, "hourly")) == 1  # its jobs stay


async def test_a_schedule_with_unique_for_makes_one_job_per_key_and_period(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        job = {**HOURLY["job"], "job_key": "{schedule}", "unique_for": "3h"}  # type: ignore[dict-item]
        await _create(api, job=job)
        scheduler = api.service.scheduler
        assert scheduler is not None
        clock.now = START + timedelta(minutes=30, seconds=2)
        await scheduler.run_once()
        clock.now = START + timedelta(hours=1, minutes=30)
        await scheduler.run_once()
        jobs = await _jobs(api, "hourly")
        assert len(jobs) == 1 and jobs[0]["payload"] == {"at": "2026-03-02T10:00:00+00:00"}
        fires = (await api.client.get("/v1/schedules/hourly/fires")).json()["fires"]
        assert [f["job_id"] for f in fires] == [jobs[0]["id"], jobs[0]["id"]]


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"cron": "0 0 30 2 *"}, "cron", "never fires"),
        ({"cron": "0 2 * * * *"}, "cron", "five fields"),
        ({"cron": "61 * * * *"}, "cron", "maximum"),
        ({"timezone": "Europe/Atlantis"}, "timezone", "unknown IANA time zone"),
        ({"cron": "0 0 31 4,6,9,11 *"}, "cron", "never fires"),
        ({"cron": "0 12 * * sat-sun"}, "cron", "day of week"),
        ({"job": {"type": "nope"}}, "job.type", "unknown job type"),
        ({"job": {"type": "ok", "queue": "nope"}}, "job.queue", "unknown queue"),
        ({"job": {"type": "ok", "priority": "high"}}, "job.priority", "integer"),
        ({"catch_up": "sometimes"}, "catch_up", "none"),
        ({"backfill": "forever"}, "backfill", ""),
        ({"job": {"type": "ok", "unique_for": "1h"}}, "job.unique_for", "needs a job_key"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(
    sqlite_api: Api, fields: dict[str, Any], field: str, words: str
) -> None:
    response = await sqlite_api.client.post("/v1/schedules", json={**HOURLY, **fields})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "invalid_request"
    assert body["field"] == field
    assert words in body["message"]
    assert (await sqlite_api.client.get("/v1/schedules")).json()["schedules"] == []


@pytest.mark.parametrize("zone", ["Europe", "America", "Etc", "America/Argentina"])
async def test_a_time_zone_folder_is_a_422_and_the_service_stays_ready(api: Api, zone: str) -> None:
    # A folder of the tz database used to be an OSError taken for a database fault: 503,
    # and /readyz not ready.
    for _ in range(3):
        response = await api.client.post("/v1/schedules", json={**HOURLY, "timezone": zone})
        assert response.status_code == 422, response.text
        assert response.json()["field"] == "timezone"
    ready = await api.client.get("/readyz")
    assert ready.status_code == 200, ready.text


async def test_weekdays_are_crontab_s_sunday_is_zero_and_seven(sqlite_api: Api) -> None:
    for name, cron in (("sun0", "0 12 * * 0"), ("sun7", "0 12 * * 7"), ("work", "0 12 * * 1-5")):
        await _create(sqlite_api, name=name, cron=cron)
    days = {}
    for name in ("sun0", "sun7", "work"):
        response = await sqlite_api.client.get(f"/v1/schedules/{name}/next", params={"count": 7})
        assert response.status_code == 200, response.text
        days[name] = {
            datetime.fromisoformat(t).strftime("%a") for t in response.json()["fire_times"]
        }
    assert days["sun0"] == days["sun7"] == {"Sun"}
    assert days["work"] == {"Mon", "Tue", "Wed", "Thu", "Fri"}


async def test_a_name_taken_is_a_409(sqlite_api: Api) -> None:
    await _create(sqlite_api)
    again = await sqlite_api.client.post("/v1/schedules", json=HOURLY)
    assert again.status_code == 409 and again.json()["field"] == "name"


CONFIGURED = {"nightly": {"cron": "0 2 * * *", "timezone": "Europe/Berlin", "job": {"type": "ok"}}}


async def test_config_schedules_are_read_only_and_their_pause_survives_a_restart(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock, schedules=CONFIGURED) as api:
        got = (await api.client.get("/v1/schedules/nightly")).json()
        assert got["source"] == "config"
        for response in (
            await api.client.patch("/v1/schedules/nightly", json={"cron": "0 3 * * *"}),
            await api.client.delete("/v1/schedules/nightly"),
        ):
            assert response.status_code == 409, response.text
            assert "config" in response.json()["message"]
        assert (await api.client.post("/v1/schedules/nightly/pause")).status_code == 200
    changed = {"nightly": {**CONFIGURED["nightly"], "cron": "0 4 * * *"}}
    async with open_api(database_url, clock=clock, schedules=changed) as api:
        got = (await api.client.get("/v1/schedules/nightly")).json()
        assert got["paused"] is True  # kept across the restart
        assert got["cron"] == "0 4 * * *"  # the config's definition wins
    async with open_api(database_url, clock=clock) as api:  # removed from the config
        assert (await api.client.get("/v1/schedules/nightly")).status_code == 404


async def test_catch_up_all_makes_each_missed_fire_time_once_across_restarts(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        await _create(api, catch_up="all", backfill="6h")
    clock.now = START + timedelta(hours=10)  # down for ten hours: 10:00 ... 19:00 missed
    for _ in range(2):  # a second restart decides nothing again
        async with open_api(database_url, clock=clock) as api:
            await api.service.scheduler.run_once()  # type: ignore[union-attr]
            jobs = await _jobs(api, "hourly")
    hours = [j["run_at"][11:13] for j in jobs]
    assert hours == ["14", "15", "16", "17", "18", "19"]  # within the 6h backfill


async def test_catch_up_latest_makes_one_job_for_the_newest_missed_fire_time(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        await _create(api, catch_up="latest")
        clock.now = START + timedelta(hours=5)
        await api.service.scheduler.run_once()  # type: ignore[union-attr]
        assert [j["run_at"] for j in await _jobs(api, "hourly")] == ["2026-03-02T14:00:00Z"]


async def test_two_schedulers_at_once_make_each_fire_time_once(database_url: str) -> None:
    if database_url.startswith("sqlite"):
        pytest.skip("one hipq process per SQLite file: several share PostgreSQL only")
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as one:
        await _create(one, catch_up="all", backfill="2d", cron="*/5 * * * *")
        clock.now = START + timedelta(hours=12)
        async with open_api(database_url, clock=clock) as two:
            a, b = one.service.scheduler, two.service.scheduler
            assert a is not None and b is not None
            await asyncio.gather(a.run_once(), b.run_once(), a.run_once(), b.run_once())
            jobs = await _jobs(one, "hourly")
    run_ats = [j["run_at"] for j in jobs]
    assert len(run_ats) == 12 * 12 == len(set(run_ats))


async def test_overlap_skip_makes_no_job_while_the_previous_one_is_open(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        await _create(api, overlap="skip")
        scheduler = api.service.scheduler
        assert scheduler is not None
        clock.now = START + timedelta(minutes=30)
        await scheduler.run_once()  # 10:00: a job
        clock.now = START + timedelta(hours=1, minutes=30)
        await scheduler.run_once()  # 11:00: skipped, the 10:00 job is still scheduled
        assert len(await _jobs(api, "hourly")) == 1
        await api.tick()  # the ok handler completes it
        assert (await _jobs(api, "hourly"))[0]["state"] == "completed"
        clock.now = START + timedelta(hours=2, minutes=30)
        await scheduler.run_once()  # 12:00: a job again
        jobs = await _jobs(api, "hourly")
        assert [j["run_at"][11:13] for j in jobs] == ["10", "12"]
        fires = (await api.client.get("/v1/schedules/hourly/fires")).json()["fires"]
        assert [f["outcome"] for f in fires] == ["created", "skipped", "created"]


async def test_a_year_of_two_oclock_in_berlin_makes_365_jobs(database_url: str) -> None:
    """Ticked once a week at 03:30 UTC through 2026 (the week's fire times caught up), the
    DST days included."""
    clock = FakeClock(datetime(2025, 12, 31, 23, 0, tzinfo=UTC))
    async with open_api(database_url, clock=clock) as api:
        await _create(
            api,
            cron="0 2 * * *",
            timezone="Europe/Berlin",
            catch_up="all",
            backfill="8d",
            job={"type": "ok"},
        )
        scheduler = api.service.scheduler
        assert scheduler is not None
        day = datetime(2026, 1, 1, 3, 30, tzinfo=UTC)
        while day.year == 2026:
            clock.now = day
            await scheduler.run_once()
            day += timedelta(days=7)
        jobs = await _jobs(api, "hourly")
    assert len(jobs) == 365
    by_day = {j["run_at"][:10]: j["run_at"][11:16] for j in jobs}
    assert len(by_day) == 365
    assert by_day["2026-03-29"] == "01:00"  # spring forward: 02:00 CET did not exist; once
    assert by_day["2026-10-25"] == "00:00"  # fall back: the first 02:00 (CEST) only
    assert by_day["2026-07-01"] == "00:00" and by_day["2026-12-01"] == "01:00"


async def test_openapi_declares_every_route_with_its_errors(sqlite_api: Api) -> None:
    spec = (await sqlite_api.client.get("/openapi.json")).json()
    paths = spec["paths"]
    expected = {
        "/v1/schedules": ({"get", "post"}, {"post": {"201", "409", "422"}}),
        "/v1/schedules/{name}": (
            {"get", "patch", "delete"},
            {"get": {"404"}, "patch": {"404", "409", "422"}, "delete": {"204", "404", "409"}},
        ),
        "/v1/schedules/{name}/pause": ({"post"}, {"post": {"404"}}),
        "/v1/schedules/{name}/resume": ({"post"}, {"post": {"404"}}),
        "/v1/schedules/{name}/run": ({"post"}, {"post": {"201", "404", "409", "422"}}),
        "/v1/schedules/{name}/next": ({"get"}, {"get": {"404", "422"}}),
        "/v1/schedules/{name}/fires": ({"get"}, {"get": {"404"}}),
    }
    for path, (methods, codes) in expected.items():
        assert methods <= set(paths[path]), path
        for method, wanted in codes.items():
            responses = paths[path][method]["responses"]
            assert wanted <= set(responses), (path, method, set(responses))
            for code in wanted - {"201", "204"}:
                ref = responses[code]["content"]["application/json"]["schema"]["$ref"]
                assert ref.endswith("/ErrorOut")


async def test_a_schedule_whose_job_type_left_the_config_is_shown_not_fired(
    database_url: str,
) -> None:
    clock = FakeClock(START)
    gone = {"gone": {"transport": {"python": {"handler": "tests.handlers:ok"}}}}
    async with open_api(database_url, clock=clock, job_types=gone) as api:
        await _create(api, job={"type": "gone"})
    clock.now = START + timedelta(minutes=30, seconds=5)
    async with open_api(database_url, clock=clock) as api:
        failed: list[dict[str, Any]] = []
        api.service.events.subscribe(
            lambda n, f: failed.append(f) if n == "schedule_failed" else None
        )
        shown = await api.client.get("/v1/schedules/hourly")
        assert shown.status_code == 200 and shown.json()["paused"] is False
        await api.service.scheduler.run_once()  # type: ignore[union-attr]
        assert await _jobs(api, "hourly") == []
        fires = (await api.client.get("/v1/schedules/hourly/fires")).json()["fires"]
        assert [f["outcome"] for f in fires] == ["invalid"]
        assert [f["schedule"] for f in failed] == ["hourly"]
        assert "job.type" in failed[0]["error"]
        run = await api.client.post("/v1/schedules/hourly/run")
        assert run.status_code == 422 and run.json()["field"] == "job.type"


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/schedules/a%00b"), ("POST", "/v1/schedules/a%00b/pause")],
)
async def test_a_name_with_nul_is_a_422_on_each_engine(api: Api, method: str, path: str) -> None:
    # PostgreSQL cannot compare a text holding NUL: it must never reach the database.
    response = await api.client.request(method, path)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "name"
