"""/v1/jobs as a client uses it: create (one or a batch), read, list, cancel, change, retry.

Tests that store jobs run on SQLite and PostgreSQL (``api``); tests of input that never
reaches the database run on SQLite only (``sqlite_api``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import handlers
from tests.api.conftest import Api, open_api
from tests.support import eventually

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # FakeClock's start: a Monday


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def later(**delta: float) -> str:
    return (NOW + timedelta(**delta)).isoformat()


ANY_FIELD = "<any>"


def assert_error(
    response: httpx.Response, status: int, field: str | None = ANY_FIELD
) -> dict[str, Any]:
    """A 4xx with the API's error shape, naming ``field`` (a prefix is enough)."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "field", "message", "errors"}, body
    assert body["message"], body
    assert body["errors"] and body["errors"][0]["field"] == body["field"], body
    if field is None:
        assert body["field"] is None, body
    elif field != ANY_FIELD:
        assert body["field"] is not None and body["field"].startswith(field), body
    return body


# -- create and read ------------------------------------------------------------------


async def test_a_job_with_every_field_is_stored_as_posted(api: Api) -> None:
    body = {
        "type": "typed",
        "payload": {"order_id": "A-17", "amount": 1200, "nested": {"list": [1, 2.5, None]}},
        "queue": "default",
        # Inside the window below (05:30 Berlin is 04:30 UTC), so run_at stays.
        "run_at": "2026-01-06T05:30:00+01:00",
        "priority": 50,
        "weight": 2,
        "labels": {"region": "east", "tier": "gold"},
        "windows": [{"start": "05:00", "end": "07:00", "tz": "Europe/Berlin", "days": "mon-fri"}],
        "timeout": "2h",
        "retry": {"strategy": "exponential", "max_attempts": 25},
        "correlation_key": "charge-A-17",
        "job_key": "order-A-17",
        "job_key_mode": "replace",
        "critical": True,
    }
    response = await api.client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["type"] == "typed"
    assert job["state"] == "scheduled"
    assert job["payload"] == body["payload"]
    assert job["queue"] == "default"
    assert at(job["run_at"]) == datetime(2026, 1, 6, 4, 30, tzinfo=UTC)
    assert job["priority"] == 50
    assert job["weight"] == 2
    assert job["labels"] == {"region": "east", "tier": "gold"}
    assert job["windows"] == body["windows"]
    assert job["timeout"] == 7200
    assert job["retry"] == {"strategy": "exponential", "max_attempts": 25}
    assert job["correlation_key"] == "charge-A-17"
    assert job["job_key"] == "order-A-17"
    assert job["critical"] is True
    assert job["attempt"] == 0
    assert at(job["created_at"]) == NOW
    assert job["finished_at"] is None and job["claimed_at"] is None
    assert job["cancel_requested"] is False

    stored = await api.job(job["id"])
    assert stored["attempts"] == []
    assert {k: v for k, v in stored.items() if k != "attempts"} == {
        k: v for k, v in job.items() if k != "attempts"
    }
    assert await api.count_jobs() == 1


async def test_defaults_come_from_the_job_type(api: Api) -> None:
    typed = await api.post_job(type="typed", payload={"order_id": 9})
    assert typed["queue"] == "bulk"
    assert typed["priority"] == 7
    assert typed["weight"] == 3
    assert typed["timeout"] == 90
    assert typed["retry"] == {"strategy": "fixed", "delay": "5s", "max_attempts": 2}
    assert typed["correlation_key"] == "order-9"
    assert at(typed["run_at"]) == NOW
    assert typed["labels"] == {} and typed["windows"] is None and typed["critical"] is False

    plain = await api.post_job(type="ok")
    assert plain["queue"] == "default"
    assert plain["priority"] == 100
    assert plain["weight"] == 1
    assert plain["timeout"] == 24 * 3600
    assert plain["payload"] == {}
    assert plain["correlation_key"] is None and plain["job_key"] is None


async def test_overrides_of_the_job_type(api: Api) -> None:
    # A retry without a strategy refines the type's; with one it replaces it.
    refined = await api.post_job(type="typed", payload={"order_id": 1}, retry={"max_attempts": 9})
    assert refined["retry"] == {"strategy": "fixed", "delay": "5s", "max_attempts": 9}
    replaced = await api.post_job(type="typed", payload={"order_id": 2}, retry={"strategy": "none"})
    assert replaced["retry"] == {"strategy": "none"}
    # An explicit correlation key wins over the type's template.
    keyed = await api.post_job(type="typed", payload={"order_id": 3}, correlation_key="mine")
    assert keyed["correlation_key"] == "mine"
    assert (await api.post_job(type="ok", timeout=45))["timeout"] == 45
    assert (await api.post_job(type="ok", timeout="1h30m"))["timeout"] == 5400
    assert (await api.post_job(type="ok", priority=-3))["priority"] == -3


async def test_windows_move_run_at_to_the_next_opening(api: Api) -> None:
    # Monday 12:00 UTC is 13:00 in Berlin: the 05:00-07:00 window next opens on Tuesday.
    berlin = {"start": "05:00", "end": "07:00", "tz": "Europe/Berlin"}
    job = await api.post_job(type="ok", windows=[berlin])
    assert at(job["run_at"]) == datetime(2026, 1, 6, 4, 0, tzinfo=UTC)
    weekend = await api.post_job(type="ok", windows=[{**berlin, "days": "sat,sun"}])
    assert at(weekend["run_at"]) == datetime(2026, 1, 10, 4, 0, tzinfo=UTC)
    # A window open at run_at keeps it.
    open_now = await api.post_job(type="ok", windows=[{"start": "11:00", "end": "13:00"}])
    assert at(open_now["run_at"]) == NOW


async def test_job_key_modes(api: Api) -> None:
    first = await api.post_job(type="ok", payload={"v": 1}, job_key="k", run_at=later(hours=1))
    replaced = await api.post_job(type="ok", payload={"v": 2}, job_key="k", run_at=later(hours=2))
    assert replaced["id"] == first["id"]
    assert replaced["payload"] == {"v": 2} and at(replaced["run_at"]) == NOW + timedelta(hours=2)

    kept = await api.post_job(
        type="ok",
        payload={"v": 3},
        job_key="k",
        run_at=later(hours=5),
        job_key_mode="preserve_run_at",
    )
    assert kept["id"] == first["id"]
    assert kept["payload"] == {"v": 3} and at(kept["run_at"]) == NOW + timedelta(hours=2)

    deduped = await api.post_job(
        type="ok", payload={"v": 4}, job_key="k", job_key_mode="unsafe_dedupe"
    )
    assert deduped["id"] == first["id"] and deduped["payload"] == {"v": 3}
    assert await api.count_jobs() == 1


async def test_get_shows_every_attempt(api: Api) -> None:
    job = await api.post_job(type="record", payload={"fail_until": 1})
    await api.tick()
    retried = await api.job(job["id"])
    assert retried["state"] == "scheduled"
    assert retried["attempt"] == 1
    assert "attempt 1 fails" in retried["last_error"]
    assert at(retried["run_at"]) == NOW + timedelta(seconds=10)  # fixed 10s retry

    api.clock.advance(10)
    await api.tick()
    done = await api.job(job["id"])
    assert done["state"] == "completed"
    assert done["result"] == {"attempt": 2}
    assert at(done["finished_at"]) == NOW + timedelta(seconds=10)
    assert [(a["attempt"], a["outcome"]) for a in done["attempts"]] == [
        (1, "retried"),
        (2, "completed"),
    ]
    assert "attempt 1 fails" in done["attempts"][0]["error"]
    assert done["attempts"][1]["response"] == {"attempt": 2}


async def test_get_unknown_job(sqlite_api: Api) -> None:
    assert_error(await sqlite_api.client.get("/v1/jobs/424242"), 404, "id")
    assert_error(await sqlite_api.client.get("/v1/jobs/abc"), 422, "job_id")
    # Ids past the database's integer range are not a 500.
    response = await sqlite_api.client.get(f"/v1/jobs/{2**70}")
    assert 400 <= response.status_code < 500, response.text


# -- list -----------------------------------------------------------------------------


async def _ids(api: Api, query: str) -> list[int]:
    response = await api.client.get(f"/v1/jobs?{query}")
    assert response.status_code == 200, response.text
    return [j["id"] for j in response.json()["jobs"]]


async def test_list_filters(api: Api) -> None:
    hour = later(hours=1)
    j1 = await api.post_job(type="ok", run_at=hour, labels={"region": "east", "tier": "gold"})
    j2 = await api.post_job(type="ok", run_at=hour, labels={"region": "west"})
    j3 = await api.post_job(type="typed", payload={"order_id": 1}, labels={"region": "east"})
    j4 = await api.post_job(type="permanent")
    j5 = await api.post_job(type="ok", run_at=hour)
    assert (await api.client.post(f"/v1/jobs/{j5['id']}/cancel")).status_code == 200
    await api.tick()
    assert (await api.job(j4["id"]))["state"] == "failed"
    i1, i2, i3, i4, i5 = (j["id"] for j in (j1, j2, j3, j4, j5))

    assert await _ids(api, "") == [i5, i4, i3, i2, i1]  # newest first
    assert await _ids(api, "queue=bulk") == [i3]
    assert await _ids(api, "queue=default") == [i5, i4, i2, i1]
    assert await _ids(api, "state=failed") == [i4]
    assert await _ids(api, "state=failed&state=cancelled") == [i5, i4]
    assert await _ids(api, "state=scheduled") == [i3, i2, i1]
    assert await _ids(api, "type=typed") == [i3]
    assert await _ids(api, "type=permanent&state=failed") == [i4]
    assert await _ids(api, "label=region:east") == [i3, i1]
    assert await _ids(api, "label=region:east&label=tier:gold") == [i1]
    assert await _ids(api, "label=region:north") == []
    assert await _ids(api, "queue=default&label=region:east") == [i1]
    assert await _ids(api, "queue=nowhere") == []


async def test_list_pages_with_a_cursor(api: Api) -> None:
    batch = {
        "jobs": [{"type": "ok" if i % 3 else "fail", "run_at": later(hours=1)} for i in range(8)]
    }
    response = await api.client.post("/v1/jobs/batch", json=batch)
    assert response.status_code == 201, response.text
    all_ids = sorted((j["id"] for j in response.json()["jobs"]), reverse=True)

    seen: list[int] = []
    cursor = None
    for _ in range(10):
        query = "limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = (await api.client.get(f"/v1/jobs?{query}")).json()
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == all_ids

    # The cursor keeps the filter: only the "ok" jobs, two per page.
    ok_ids = [i for i, j in zip(all_ids, reversed(batch["jobs"]), strict=True) if j["type"] == "ok"]
    first = (await api.client.get("/v1/jobs?type=ok&limit=2")).json()
    cursor = first["next_cursor"]
    second = (await api.client.get(f"/v1/jobs?type=ok&limit=2&cursor={cursor}")).json()
    assert [j["id"] for j in first["jobs"] + second["jobs"]] == ok_ids[:4]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("cursor=abc", "cursor"),
        ("cursor=-5", "cursor"),
        (f"cursor={2**70}", "cursor"),
        ("label=region", "label"),
        ("label=:east", "label"),
        ("state=sleeping", "state"),
        ("limit=0", "limit"),
        ("limit=100000", "limit"),
        ("limit=many", "limit"),
    ],
)
async def test_list_refuses_bad_filters(sqlite_api: Api, query: str, field: str) -> None:
    assert_error(await sqlite_api.client.get(f"/v1/jobs?{query}"), 422, field)


# -- cancel, change, retry --------------------------------------------------------------


async def test_cancel(api: Api) -> None:
    scheduled = await api.post_job(type="ok", run_at=later(hours=1))
    response = await api.client.post(f"/v1/jobs/{scheduled['id']}/cancel")
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "cancelled"
    assert at(response.json()["finished_at"]) == NOW

    running = await api.post_job(type="hang")
    await api.tick()
    assert (await api.job(running["id"]))["state"] == "running"
    assert running["id"] in handlers.RUNNING
    response = await api.client.post(f"/v1/jobs/{running['id']}/cancel")
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "running"
    assert response.json()["cancel_requested"] is True
    await api.tick()
    cancelled = await api.job(running["id"])
    assert cancelled["state"] == "cancelled"
    assert [a["outcome"] for a in cancelled["attempts"]] == ["cancelled"]
    await eventually(lambda: running["id"] not in handlers.RUNNING, timeout=60)

    done = await api.post_job(type="ok")
    await api.tick()
    for terminal in (scheduled, running, done):
        body = assert_error(
            await api.client.post(f"/v1/jobs/{terminal['id']}/cancel"), 409, "state"
        )
        assert body["error"] == "conflict"
    assert_error(await api.client.post("/v1/jobs/424242/cancel"), 404, "id")


async def test_patch_a_scheduled_job(api: Api) -> None:
    job = await api.post_job(type="ok", run_at=later(hours=1))
    changes = {
        "priority": 5,
        "payload": {"a": 1},
        "labels": {"region": "north"},
        "weight": 4,
        "timeout": "2m",
        "run_at": later(hours=2),
    }
    response = await api.client.patch(f"/v1/jobs/{job['id']}", json=changes)
    assert response.status_code == 200, response.text
    stored = await api.job(job["id"])
    assert stored["priority"] == 5
    assert stored["payload"] == {"a": 1}
    assert stored["labels"] == {"region": "north"}
    assert stored["weight"] == 4
    assert stored["timeout"] == 120
    assert at(stored["run_at"]) == NOW + timedelta(hours=2)
    assert stored["state"] == "scheduled"

    # Windows move run_at to their next opening, from the job's run_at or the given one.
    berlin = [{"start": "05:00", "end": "07:00", "tz": "Europe/Berlin"}]
    moved = (await api.client.patch(f"/v1/jobs/{job['id']}", json={"windows": berlin})).json()
    assert at(moved["run_at"]) == datetime(2026, 1, 6, 4, 0, tzinfo=UTC)
    assert moved["windows"] == berlin
    moved = (
        await api.client.patch(
            f"/v1/jobs/{job['id']}", json={"windows": berlin, "run_at": "2026-01-08T12:00:00Z"}
        )
    ).json()
    assert at(moved["run_at"]) == datetime(2026, 1, 9, 4, 0, tzinfo=UTC)
    cleared = (await api.client.patch(f"/v1/jobs/{job['id']}", json={"windows": None})).json()
    assert cleared["windows"] is None
    assert await api.count_jobs() == 1


async def test_patch_refuses_bad_changes(api: Api) -> None:
    job = await api.post_job(type="ok", run_at=later(hours=1))
    url = f"/v1/jobs/{job['id']}"
    assert_error(await api.client.patch(url, json={"priority": None}), 422, "priority")
    assert_error(await api.client.patch(url, json={"type": "fail"}), 422, "type")
    assert_error(await api.client.patch(url, json={"weight": 0}), 422, "weight")
    assert_error(await api.client.patch(url, json={"timeout": -1}), 422, "timeout")
    assert_error(await api.client.patch(url, json={"timeout": 0}), 422, "timeout")
    assert_error(await api.client.patch(url, json={"timeout": "soon"}), 422, "timeout")
    assert_error(await api.client.patch(url, json={"timeout": 1e300}), 422, "timeout")
    assert_error(
        await api.client.patch(url, json={"run_at": "1900-01-01T00:00:00Z"}), 422, "run_at"
    )
    assert_error(await api.client.patch(url, json={"payload": [1]}), 422, "payload")
    assert_error(await api.client.patch(url, json={"run_at": "2026-01-05T12:00:00"}), 422, "run_at")
    bad_windows = [{"start": "05:00", "end": "05:00"}]
    assert_error(await api.client.patch(url, json={"windows": bad_windows}), 422, "windows[0].end")
    assert_error(await api.client.patch("/v1/jobs/424242", json={"priority": 1}), 404, "id")
    assert (await api.job(job["id"]))["updated_at"] == job["updated_at"]  # nothing changed


async def test_patch_checks_a_weight_against_the_jobs_own_queue(api: Api) -> None:
    small = await api.post_job(type="ok", run_at=later(hours=1))  # default: capacity 10
    response = await api.client.patch(f"/v1/jobs/{small['id']}", json={"weight": 11})
    assert_error(response, 422, "weight")
    assert response.json()["message"] == "weight: 11 exceeds the capacity 10 of queue default"
    assert (await api.job(small["id"]))["updated_at"] == small["updated_at"]
    unlimited = await api.post_job(type="ok", queue="bulk", run_at=later(hours=1))
    response = await api.client.patch(f"/v1/jobs/{unlimited['id']}", json={"weight": 11})
    assert response.status_code == 200, response.text
    assert response.json()["weight"] == 11


async def test_patch_only_scheduled_jobs(api: Api) -> None:
    running = await api.post_job(type="hang")
    done = await api.post_job(type="ok")
    await api.tick()
    assert (await api.job(done["id"]))["state"] == "completed"
    for job in (running, done):
        assert_error(
            await api.client.patch(f"/v1/jobs/{job['id']}", json={"priority": 1}), 409, "state"
        )
        windows = {"windows": [{"start": "05:00", "end": "07:00"}]}
        assert_error(await api.client.patch(f"/v1/jobs/{job['id']}", json=windows), 409, "state")


async def test_retry_failed_and_cancelled_jobs(api: Api) -> None:
    failed = await api.post_job(type="permanent")
    await api.tick()
    assert (await api.job(failed["id"]))["state"] == "failed"
    api.clock.advance(60)
    response = await api.client.post(f"/v1/jobs/{failed['id']}/retry")
    assert response.status_code == 200, response.text
    again = response.json()
    assert again["state"] == "scheduled"
    assert again["finished_at"] is None
    assert at(again["run_at"]) == NOW + timedelta(seconds=60)
    await api.tick()
    rerun = await api.job(failed["id"])
    assert rerun["state"] == "failed"
    assert [(a["attempt"], a["outcome"]) for a in rerun["attempts"]] == [
        (1, "failed"),
        (2, "failed"),
    ]

    cancelled = await api.post_job(type="ok", run_at=later(hours=1))
    await api.client.post(f"/v1/jobs/{cancelled['id']}/cancel")
    response = await api.client.post(
        f"/v1/jobs/{cancelled['id']}/retry", json={"run_at": later(hours=3)}
    )
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "scheduled"
    assert at(response.json()["run_at"]) == NOW + timedelta(hours=3)

    completed = await api.post_job(type="ok")
    await api.tick()
    for job in (completed, cancelled):  # cancelled was retried: it is scheduled again
        assert_error(await api.client.post(f"/v1/jobs/{job['id']}/retry"), 409, "state")
    assert_error(await api.client.post("/v1/jobs/424242/retry"), 404, "id")
    assert_error(
        await api.client.post(f"/v1/jobs/{failed['id']}/retry", json={"run_at": "soon"}),
        422,
        "run_at",
    )


# -- batches ----------------------------------------------------------------------------


async def test_a_batch_of_ten_thousand_jobs(api: Api) -> None:
    batch = {
        "jobs": [
            {"type": "ok", "payload": {"n": i}, "labels": {"shard": str(i % 4)}}
            for i in range(10_000)
        ]
    }
    response = await api.client.post("/v1/jobs/batch", json=batch)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["count"] == 10_000
    assert len({j["id"] for j in body["jobs"]}) == 10_000
    assert await api.count_jobs() == 10_000
    # The answer is in the order of the request.
    last = await api.job(body["jobs"][-1]["id"])
    assert last["payload"] == {"n": 9999} and last["labels"] == {"shard": "3"}
    first = await api.job(body["jobs"][0]["id"])
    assert first["payload"] == {"n": 0}


def _batch(n: int, **at_index: dict[str, Any]) -> dict[str, Any]:
    jobs = [{"type": "ok", "payload": {"n": i}} for i in range(n)]
    for index, fields in at_index.items():
        jobs[int(index.removeprefix("i"))].update(fields)
    return {"jobs": jobs}


async def test_a_bad_batch_writes_nothing(api: Api) -> None:
    cases = [
        (_batch(10, i7={"weight": 0}), 422, "jobs[7].weight"),
        (_batch(10, i3={"type": "nope"}), 422, "jobs[3].type"),
        (_batch(10, i4={"queue": "nope"}), 422, "jobs[4].queue"),
        (
            _batch(10, i9={"windows": [{"start": "01:00", "end": "02:00", "tz": "Mars/Base"}]}),
            422,
            "jobs[9].windows[0].tz",
        ),
        # Found by the database, after earlier rows were inserted: rolled back.
        (
            _batch(10, i2={"correlation_key": "same"}, i8={"correlation_key": "same"}),
            409,
            "correlation_key",
        ),
        ({"jobs": []}, 422, "jobs"),
        ({"jobs": {"type": "ok"}}, 422, "jobs"),
        ({"job": [{"type": "ok"}]}, 422, "job"),
    ]
    for body, status, field in cases:
        response = await api.client.post("/v1/jobs/batch", json=body)
        error = assert_error(response, status, field)
        if "[" in field:
            assert error["field"] == field
        assert await api.count_jobs() == 0


async def test_batch_size_limit(database_url: str) -> None:
    async with open_api(database_url, server={"max_batch_jobs": 5}) as api:
        assert_error(await api.client.post("/v1/jobs/batch", json=_batch(6)), 422, "jobs")
        assert await api.count_jobs() == 0
        response = await api.client.post("/v1/jobs/batch", json=_batch(5))
        assert response.status_code == 201, response.text
        assert await api.count_jobs() == 5


# -- idempotency and uniqueness ---------------------------------------------------------


async def test_idempotency_key(api: Api) -> None:
    body = {"type": "ok", "payload": {"order": 1}}
    headers = {"Idempotency-Key": "req-1"}
    first = await api.client.post("/v1/jobs", json=body, headers=headers)
    assert first.status_code == 201, first.text
    assert "Idempotent-Replayed" not in first.headers
    again = await api.client.post("/v1/jobs", json=body, headers=headers)
    assert again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert await api.count_jobs() == 1

    other = await api.client.post("/v1/jobs", json={**body, "priority": 1}, headers=headers)
    body_409 = assert_error(other, 409, "Idempotency-Key")
    assert body_409["error"] == "conflict"
    assert await api.count_jobs() == 1

    # Without the key, or with another one, the same body is a new job.
    assert (await api.client.post("/v1/jobs", json=body)).status_code == 201
    fresh = await api.client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "req-2"})
    assert fresh.status_code == 201
    assert await api.count_jobs() == 3

    batch = _batch(3)
    created = await api.client.post("/v1/jobs/batch", json=batch, headers={"Idempotency-Key": "b"})
    assert created.status_code == 201
    replay = await api.client.post("/v1/jobs/batch", json=batch, headers={"Idempotency-Key": "b"})
    assert replay.status_code == 200
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert [j["id"] for j in replay.json()["jobs"]] == [j["id"] for j in created.json()["jobs"]]
    assert await api.count_jobs() == 6


async def test_a_failed_request_does_not_burn_its_idempotency_key(api: Api) -> None:
    headers = {"Idempotency-Key": "k"}
    await api.post_job(type="ok", correlation_key="taken")
    clash = await api.client.post(
        "/v1/jobs", json={"type": "ok", "correlation_key": "taken"}, headers=headers
    )
    assert_error(clash, 409, "correlation_key")
    ok = await api.client.post(
        "/v1/jobs", json={"type": "ok", "correlation_key": "free"}, headers=headers
    )
    assert ok.status_code == 201, ok.text


async def test_correlation_key_is_unique_among_open_jobs(api: Api) -> None:
    first = await api.post_job(type="ok", correlation_key="c-1", run_at=later(hours=1))
    body = assert_error(
        await api.client.post("/v1/jobs", json={"type": "ok", "correlation_key": "c-1"}),
        409,
        "correlation_key",
    )
    assert body["error"] == "conflict"
    await api.post_job(type="typed", payload={"order_id": 9})
    templated = await api.client.post(
        "/v1/jobs", json={"type": "typed", "payload": {"order_id": 9}}
    )
    assert_error(templated, 409, "correlation_key")
    assert await api.count_jobs() == 2

    # A finished job frees its key.
    await api.client.post(f"/v1/jobs/{first['id']}/cancel")
    assert (await api.post_job(type="ok", correlation_key="c-1"))["correlation_key"] == "c-1"
    # ... and retrying the old one now clashes with the new holder.
    assert_error(await api.client.post(f"/v1/jobs/{first['id']}/retry"), 409, "correlation_key")

    # A template that cannot be filled names the payload.
    assert_error(await api.client.post("/v1/jobs", json={"type": "typed"}), 422, "payload")


# -- bad input --------------------------------------------------------------------------

BERLIN = {"start": "05:00", "end": "07:00", "tz": "Europe/Berlin"}
BAD_JOBS: list[tuple[str, dict[str, Any], str]] = [
    ("unknown queue", {"type": "ok", "queue": "nope"}, "queue"),
    ("unknown type", {"type": "nope"}, "type"),
    ("missing type", {"payload": {}}, "type"),
    ("type not a string", {"type": 5}, "type"),
    ("run_at not a date", {"type": "ok", "run_at": "tomorrow"}, "run_at"),
    ("run_at without offset", {"type": "ok", "run_at": "2026-01-05T12:00:00"}, "run_at"),
    ("run_at impossible", {"type": "ok", "run_at": "2026-02-30T12:00:00Z"}, "run_at"),
    ("run_at before 1970", {"type": "ok", "run_at": "0316-12-30T11:41:19Z"}, "run_at"),
    ("run_at at the end of time", {"type": "ok", "run_at": "9999-12-31T23:59:59-05:00"}, "run_at"),
    ("weight zero", {"type": "ok", "weight": 0}, "weight"),
    ("weight negative", {"type": "ok", "weight": -2}, "weight"),
    ("weight a string", {"type": "ok", "weight": "2"}, "weight"),
    ("weight over the queue's capacity", {"type": "ok", "weight": 11}, "weight"),
    ("priority a string", {"type": "ok", "priority": "5"}, "priority"),
    ("priority a float", {"type": "ok", "priority": 1.5}, "priority"),
    ("priority too big", {"type": "ok", "priority": 2**40}, "priority"),
    ("timeout negative", {"type": "ok", "timeout": -5}, "timeout"),
    ("timeout zero", {"type": "ok", "timeout": 0}, "timeout"),
    ("timeout not a duration", {"type": "ok", "timeout": "soon"}, "timeout"),
    ("timeout negative string", {"type": "ok", "timeout": "-5s"}, "timeout"),
    ("timeout a boolean", {"type": "ok", "timeout": True}, "timeout"),
    # The deadline (claim time + timeout) must stay a date the loop can compute.
    ("timeout beyond ten years", {"type": "ok", "timeout": 1e300}, "timeout"),
    ("timeout beyond ten years as text", {"type": "ok", "timeout": "4000d"}, "timeout"),
    ("timeout a huge integer", {"type": "ok", "timeout": 2**64 - 1}, "timeout"),
    ("timeout a list", {"type": "ok", "timeout": [5]}, "timeout"),
    ("payload a list", {"type": "ok", "payload": [1, 2]}, "payload"),
    ("payload a string", {"type": "ok", "payload": "x"}, "payload"),
    ("payload null", {"type": "ok", "payload": None}, "payload"),
    ("windows bad tz", {"type": "ok", "windows": [{**BERLIN, "tz": "Mars/Base"}]}, "windows[0].tz"),
    (
        "windows start == end",
        {"type": "ok", "windows": [BERLIN, {**BERLIN, "end": "05:00"}]},
        "windows[1].end",
    ),
    (
        "windows bad time",
        {"type": "ok", "windows": [{**BERLIN, "start": "25:00"}]},
        "windows[0].start",
    ),
    (
        "windows bad days",
        {"type": "ok", "windows": [{**BERLIN, "days": "someday"}]},
        "windows[0].days",
    ),
    ("windows not a list", {"type": "ok", "windows": BERLIN}, "windows"),
    ("window unknown field", {"type": "ok", "windows": [{**BERLIN, "x": 1}]}, "windows[0].x"),
    ("unknown field", {"type": "ok", "colour": "red"}, "colour"),
    ("label not a string", {"type": "ok", "labels": {"region": 1}}, "labels.region"),
    ("label null", {"type": "ok", "labels": {"region": None}}, "labels.region"),
    ("labels a list", {"type": "ok", "labels": ["east"]}, "labels"),
    ("critical a string", {"type": "ok", "critical": "yes"}, "critical"),
    (
        "job_key_mode unknown",
        {"type": "ok", "job_key": "k", "job_key_mode": "often"},
        "job_key_mode",
    ),
    ("retry unknown strategy", {"type": "ok", "retry": {"strategy": "nope"}}, "retry"),
    ("retry zero attempts", {"type": "ok", "retry": {"max_attempts": 0}}, "retry.max_attempts"),
    ("retry a string", {"type": "ok", "retry": "always"}, "retry"),
    ("correlation_key empty", {"type": "ok", "correlation_key": ""}, "correlation_key"),
    ("correlation_key a number", {"type": "ok", "correlation_key": 7}, "correlation_key"),
]


@pytest.mark.parametrize(("body", "field"), [c[1:] for c in BAD_JOBS], ids=[c[0] for c in BAD_JOBS])
async def test_bad_job_names_the_field(sqlite_api: Api, body: dict[str, Any], field: str) -> None:
    error = assert_error(await sqlite_api.client.post("/v1/jobs", json=body), 422, field)
    assert error["error"] == "invalid_request"
    # The same job inside a batch is named by its index.
    batch = {"jobs": [{"type": "ok"}, {"type": "ok"}, body]}
    assert_error(
        await sqlite_api.client.post("/v1/jobs/batch", json=batch), 422, f"jobs[2].{field}"
    )
    assert await sqlite_api.count_jobs() == 0


NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"]
RAW_BODIES: list[tuple[str, bytes]] = [
    *((f"{v} top level", b'{"type": "ok", "priority": %s}' % v.encode()) for v in NON_FINITE),
    *(
        (f"{v} in payload", b'{"type": "ok", "payload": {"a": {"b": [1, %s]}}}' % v.encode())
        for v in NON_FINITE
    ),
    *((f"{v} as timeout", b'{"type": "ok", "timeout": %s}' % v.encode()) for v in NON_FINITE),
    ("empty body", b""),
    ("invalid JSON", b'{"type": "ok",'),
    ("not JSON at all", b"type=ok"),
    ("a lone surrogate", b'{"type": "ok", "payload": {"s": "\\ud800"}}'),
    ("a JSON list", b'[{"type": "ok"}]'),
    ("a JSON string", b'"ok"'),
    ("JSON null", b"null"),
]


@pytest.mark.parametrize("raw", [r for _, r in RAW_BODIES], ids=[n for n, _ in RAW_BODIES])
async def test_bad_bodies_are_refused(sqlite_api: Api, raw: bytes) -> None:
    for path in ("/v1/jobs", "/v1/jobs/batch"):
        response = await sqlite_api.client.post(
            path, content=raw, headers={"content-type": "application/json"}
        )
        error = assert_error(response, 422, None)  # the body as a whole is at fault
        assert error["error"] == "invalid_request"
        assert "JSON" in error["message"], error
    assert await sqlite_api.count_jobs() == 0


async def test_body_errors_say_what_is_wrong(sqlite_api: Api) -> None:
    async def post(raw: bytes, content_type: str | None = "application/json") -> str:
        headers = {"content-type": content_type} if content_type else {}
        response = await sqlite_api.client.post("/v1/jobs", content=raw, headers=headers)
        # Another declared type is refused before the route: 415 naming the header.
        status, field = (415, "content-type") if content_type == "text/plain" else (422, None)
        return assert_error(response, status, field)["message"]

    assert "required" in await post(b"")
    assert "must be a JSON object" in await post(b"[1]")
    # curl -d sends form content by default: say what to send instead.
    assert "content-type: application/json" in await post(b'{"type": "ok"}', "text/plain")
    assert "content-type: application/json" in await post(b'{"type": "ok"}', None)
    assert await sqlite_api.count_jobs() == 0


async def test_null_characters_in_strings(api: Api) -> None:
    # PostgreSQL cannot store U+0000 in text or jsonb: refused as input on both engines.
    for body, field in (
        ({"type": "ok", "payload": {"s": "a\u0000b"}}, "payload.s"),
        ({"type": "ok", "payload": {"list": [1, {"deep": "\u0000"}]}}, "payload.list[1].deep"),
        ({"type": "ok", "payload": {"a\u0000": 1}}, "payload.a"),
        ({"type": "ok", "labels": {"region": "e\u0000st"}}, "labels.region"),
        ({"type": "ok", "correlation_key": "k\u0000"}, "correlation_key"),
        ({"type": "ok", "job_key": "k\u0000"}, "job_key"),
        ({"type": "ok", "retry": {"max_attempts": 2, "note": "\u0000"}}, "retry.note"),
    ):
        assert_error(await api.client.post("/v1/jobs", json=body), 422, field)
    assert await api.count_jobs() == 0

    job = await api.post_job(type="ok", run_at=later(hours=1))
    patch = await api.client.patch(f"/v1/jobs/{job['id']}", json={"payload": {"s": "\u0000"}})
    assert_error(patch, 422, "payload.s")
    for query in ("queue=%00", "type=a%00", "label=region:%00"):
        assert_error(await api.client.get(f"/v1/jobs?{query}"), 422, query.split("=")[0])
    # A backslash followed by "u0000" is ordinary text.
    text = await api.post_job(type="ok", payload={"s": "\\u0000"})
    assert (await api.job(text["id"]))["payload"] == {"s": "\\u0000"}


# -- body size ----------------------------------------------------------------------------


@pytest.fixture
async def small_api(sqlite_url: str) -> AsyncIterator[Api]:
    async with open_api(sqlite_url, server={"max_body_bytes": 2048}) as opened:
        yield opened


async def test_a_body_over_the_limit_is_413(small_api: Api) -> None:
    big = {"type": "ok", "payload": {"blob": "x" * 3000}}
    body = assert_error(await small_api.client.post("/v1/jobs", json=big), 413, None)
    assert body["error"] == "body_too_large"
    assert "2048" in body["message"]
    response = await small_api.client.post("/v1/jobs/batch", json={"jobs": [big]})
    assert_error(response, 413, None)
    small = {"type": "ok", "payload": {"blob": "x" * 1500}}
    assert (await small_api.client.post("/v1/jobs", json=small)).status_code == 201
    assert await small_api.count_jobs() == 1


async def test_a_chunked_body_over_the_limit_is_413(small_api: Api) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"type": "ok", "payload": {"blob": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}}'

    response = await small_api.client.post(
        "/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "content-length" not in response.request.headers
    body = assert_error(response, 413, None)
    assert body["error"] == "body_too_large"
    assert await small_api.count_jobs() == 0


# -- fuzz -----------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=10,
)
JOB_FIELDS = {
    "type": st.sampled_from(["ok", "typed", "nope", ""]) | JSON_VALUES,
    "payload": st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4) | JSON_VALUES,
    "queue": st.sampled_from(["default", "bulk", "nope"]) | JSON_VALUES,
    "run_at": st.datetimes(timezones=st.timezones()).map(datetime.isoformat) | JSON_VALUES,
    "priority": st.integers() | JSON_VALUES,
    "weight": st.integers() | JSON_VALUES,
    "labels": st.dictionaries(st.text(max_size=8), st.text(max_size=8) | JSON_VALUES, max_size=3)
    | JSON_VALUES,
    "windows": st.lists(
        st.fixed_dictionaries(
            {
                "start": st.sampled_from(["05:00", "24:00", "x"]) | JSON_VALUES,
                "end": st.sampled_from(["07:00", "05:00"]) | JSON_VALUES,
            },
            optional={
                "tz": st.sampled_from(["UTC", "Europe/Berlin", "../etc", ""]) | JSON_VALUES,
                "days": st.sampled_from(["mon-fri", "fri-mon", "x"]) | JSON_VALUES,
            },
        ),
        max_size=2,
    )
    | JSON_VALUES,
    "timeout": st.sampled_from(["24h", "1h30m", "0s", "-1s", "1e400s"]) | JSON_VALUES,
    "retry": st.fixed_dictionaries(
        {},
        optional={
            "strategy": st.sampled_from(["fixed", "exponential", "none", "nope"]) | JSON_VALUES,
            "max_attempts": st.integers() | JSON_VALUES,
            "delay": st.sampled_from(["1s", "x"]) | JSON_VALUES,
        },
    )
    | JSON_VALUES,
    "correlation_key": st.text(max_size=10) | JSON_VALUES,
    "job_key": st.text(max_size=10) | JSON_VALUES,
    "job_key_mode": st.sampled_from(["replace", "preserve_run_at", "unsafe_dedupe", "x"])
    | JSON_VALUES,
    "critical": st.booleans() | JSON_VALUES,
}
JOB_BODIES = st.fixed_dictionaries(
    {"type": st.sampled_from(["ok", "typed"])},
    optional={k: v for k, v in JOB_FIELDS.items() if k != "type"},
) | st.fixed_dictionaries({}, optional=JOB_FIELDS)


@pytest.fixture
def fuzz_target(database_url: str) -> Any:
    """A started API on its own event loop, shared by every generated example."""
    with asyncio.Runner() as runner:
        opened = open_api(database_url)
        api = runner.run(opened.__aenter__())
        try:
            yield runner, api, runner.run(api.post_job(type="ok", run_at=later(days=1)))["id"]
        finally:
            runner.run(opened.__aexit__(None, None, None))


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=JOB_BODIES | JSON_VALUES, how=st.sampled_from(["one", "batch", "patch"]))
def test_random_bodies_never_get_a_500(fuzz_target: Any, body: Any, how: str) -> None:
    runner, api, job_id = fuzz_target
    if how == "patch":
        if isinstance(body, dict):
            body.pop("type", None)  # PATCH refuses it; let the other fields through
        request = api.client.patch(f"/v1/jobs/{job_id}", json=body)
    else:
        path, sent = ("/v1/jobs/batch", {"jobs": [body]}) if how == "batch" else ("/v1/jobs", body)
        request = api.client.post(path, json=sent)
    response = runner.run(request)
    assert response.status_code < 500, (how, body, response.text)
    if response.status_code >= 400:
        assert_error(response, response.status_code)


async def test_reusing_the_idempotency_key_of_a_deleted_job_is_a_conflict(api: Api) -> None:
    body = {"type": "ok"}
    headers = {"Idempotency-Key": "gone"}
    first = await api.client.post("/v1/jobs", json=body, headers=headers)
    assert first.status_code == 201, first.text
    await _finish(api, first.json()["id"])
    deleted = await api.client.delete(f"/v1/jobs/{first.json()['id']}")
    assert deleted.status_code == 200, deleted.text
    again = await api.client.post("/v1/jobs", json=body, headers=headers)
    assert "deleted" in assert_error(again, 409, "Idempotency-Key")["message"]
    assert await api.count_jobs() == 0

    batch = _batch(2)
    made = await api.client.post("/v1/jobs/batch", json=batch, headers={"Idempotency-Key": "b"})
    assert made.status_code == 201, made.text
    gone = made.json()["jobs"][1]["id"]
    await _finish(api, gone)
    assert (await api.client.delete(f"/v1/jobs/{gone}")).status_code == 200
    replay = await api.client.post("/v1/jobs/batch", json=batch, headers={"Idempotency-Key": "b"})
    assert_error(replay, 409, "Idempotency-Key")
    assert await api.count_jobs() == 1


async def _finish(api: Api, job_id: int) -> None:
    async def done() -> bool:
        await api.tick()
        return (await api.job(job_id))["state"] == "completed"

    await eventually(done, timeout=60)


@pytest.mark.parametrize("value", [268824578, 1.5e9, True])
async def test_an_instant_given_as_a_number_is_refused(api: Api, value: Any) -> None:
    # The schema says RFC 3339 text; a number is not taken as Unix seconds.
    refused = await api.client.post("/v1/jobs", json={"type": "ok", "run_at": value})
    assert refused.status_code == 422, refused.text
    assert refused.json()["field"] == "run_at"
    job = await api.post_job(type="ok")
    moved = await api.client.post(f"/v1/jobs/{job['id']}/reschedule", json={"run_at": value})
    assert moved.status_code == 422, moved.text
    assert moved.json()["field"] == "run_at"
    assert await api.count_jobs() == 1
    assert (await api.job(job["id"]))["run_at"] == job["run_at"]
