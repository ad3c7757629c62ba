"""Bulk operations through the API, on both engines: a dry run counts, an operation
goes on in bounded steps whose progress GET shows, jobs in flight get their loop's
request, and bad input is refused before anything changes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.api.conftest import Api, open_api

STEP = 4  # jobs per step, small so that the tests see several steps


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[Api]:
    async with open_api(database_url, server={"bulk_step_size": STEP}) as opened:
        yield opened


async def post_many(api: Api, count: int, **fields: Any) -> list[int]:
    jobs = [{"type": "ok", "run_in": "1h", **fields} for _ in range(count)]
    answer = await api.client.post("/v1/jobs/batch", json={"jobs": jobs})
    assert answer.status_code == 201, answer.text
    return [j["id"] for j in answer.json()["jobs"]]


async def bulk(api: Api, **body: Any) -> dict[str, Any]:
    answer = await api.client.post("/v1/jobs/bulk", json=body)
    assert answer.status_code in (200, 202), answer.text
    return answer.json()


async def run_to_end(api: Api, op_id: int) -> list[dict[str, Any]]:
    """Drive the runner step by step; the operation as GET showed it after each step."""
    seen = []
    for _ in range(100):
        await api.service.bulk.run_once()
        op = (await api.client.get(f"/v1/jobs/bulk/{op_id}")).json()
        seen.append(op)
        if op["state"] != "running":
            return seen
    raise AssertionError("the operation did not end")


async def states(api: Api, ids: list[int]) -> list[str]:
    return [(await api.job(i))["state"] for i in ids]


async def test_dry_run_counts_and_changes_nothing(api: Api) -> None:
    east = await post_many(api, 6, labels={"region": "east"})
    await post_many(api, 3, labels={"region": "west"})
    counted = await bulk(api, action="cancel", filter={"labels": {"region": "east"}}, dry_run=True)
    assert counted == {"dry_run": True, "matched": 6}
    assert set(await states(api, east)) == {"scheduled"}


async def test_cancel_in_steps_with_visible_progress(api: Api) -> None:
    east = await post_many(api, 10, labels={"region": "east"})
    west = await post_many(api, 2, labels={"region": "west"})
    op = await bulk(
        api, action="cancel", filter={"labels": {"region": "east"}}, reason="region down"
    )
    assert op["state"] == "running" and op["matched"] == 0
    seen = await run_to_end(api, op["id"])
    assert [s["matched"] for s in seen] == [4, 8, 10]  # one bounded step at a time
    assert seen[-1]["state"] == "done" and seen[-1]["changed"] == 10
    assert set(await states(api, east)) == {"cancelled"}
    assert set(await states(api, west)) == {"scheduled"}
    assert (await api.job(east[0]))["last_error"] == "region down"


async def test_jobs_in_flight_are_asked_of_their_loop(api: Api) -> None:
    running = await api.post_job(type="hang")
    await api.tick()
    waiting = await post_many(api, 2, type="hang")
    op = await bulk(api, action="fail", filter={"type": "hang"}, reason="hung")
    final = (await run_to_end(api, op["id"]))[-1]
    assert (final["changed"], final["requested"], final["skipped"]) == (2, 1, 0)
    assert (await api.job(running["id"]))["state"] == "running"  # its loop decides
    await api.tick()
    assert (await api.job(running["id"]))["state"] == "failed"
    assert set(await states(api, waiting)) == {"failed"}


async def test_retry_and_delete_by_error_text(api: Api) -> None:
    failed = [(await api.post_job(type="permanent"))["id"] for _ in range(5)]
    fine = await api.post_job(type="ok")
    await api.tick()
    assert set(await states(api, failed)) == {"failed"}
    op = await bulk(
        api, action="reschedule", filter={"error_contains": "never work"}, run_in="1h", priority=1
    )
    final = (await run_to_end(api, op["id"]))[-1]
    assert final["changed"] == 5
    again = await api.job(failed[0])
    assert again["state"] == "scheduled" and again["priority"] == 1
    # Only finished jobs are deleted; the others are counted as skipped.
    op = await bulk(api, action="delete", filter={"ids": [*failed, fine["id"]]})
    final = (await run_to_end(api, op["id"]))[-1]
    assert (final["changed"], final["skipped"]) == (1, 5)
    assert (await api.client.get(f"/v1/jobs/{fine['id']}")).status_code == 404


async def test_a_bulk_max_attempts_leaves_a_strategy_that_refuses_it_alone(api: Api) -> None:
    none = (await api.post_job(type="permanent", retry={"strategy": "none"}))["id"]
    fixed = (await api.post_job(type="permanent", retry={"strategy": "fixed"}))["id"]
    await api.tick()
    op = await bulk(api, action="reschedule", filter={"ids": [none, fixed]}, max_attempts=4)
    final = (await run_to_end(api, op["id"]))[-1]
    assert final["changed"] == 2
    kept, changed = await api.job(none), await api.job(fixed)
    assert kept["state"] == changed["state"] == "scheduled"
    assert kept["retry"] == {"strategy": "none"}  # unchanged: it still loads
    assert changed["retry"]["max_attempts"] == 4


async def test_the_runner_in_the_background_finishes_it(database_url: str) -> None:
    async with open_api(database_url, server={"bulk_step_size": STEP}) as api:
        ids = await post_many(api, 9)
        api.service.bulk.runs = True
        await api.service.bulk.start()
        op = await bulk(api, action="complete", filter={"ids": ids}, result={"by": "bulk"})
        for _ in range(500):
            got = (await api.client.get(f"/v1/jobs/bulk/{op['id']}")).json()
            if got["state"] == "done":
                break
            await asyncio.sleep(0.01)
        assert got["state"] == "done" and got["changed"] == 9
        assert (await api.job(ids[-1]))["result"] == {"by": "bulk"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "cancel", "filter": {}}, "filter"),
        ({"action": "explode", "filter": {"queue": "default"}}, "action"),
        ({"action": "fail", "filter": {"queue": "default"}}, "reason"),
        ({"action": "delete", "filter": {"queue": "default"}, "priority": 1}, "priority"),
        ({"action": "retry", "filter": {"states": ["lost"]}}, "filter.states[0]"),
        (
            {
                "action": "retry",
                "filter": {"queue": "default"},
                "run_in": 1,
                "run_at": "2026-01-05T12:00:00Z",
            },
            "run_in",
        ),
    ],
)
async def test_bad_input_is_refused(sqlite_api: Api, body: dict[str, Any], field: str) -> None:
    answer = await sqlite_api.client.post("/v1/jobs/bulk", json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field
    assert (await sqlite_api.client.get("/v1/jobs/bulk")).json() == {"operations": []}


async def test_unknown_operation_is_404(sqlite_api: Api) -> None:
    answer = await sqlite_api.client.get("/v1/jobs/bulk/99")
    assert answer.status_code == 404 and answer.json()["field"] == "id"
