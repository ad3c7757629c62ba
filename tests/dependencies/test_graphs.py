"""Graphs of ``after`` at size, on both engines: a chain and a fan-out of 10,000 jobs
whose prerequisite is cancelled by an operator or fails in its queue's tick, every job
that waits ends cancelled, and the queue runs on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import bindparam, func, insert, select, update

from hipq.dependencies import AFTER_PARKED, waiting_reason
from hipq.store.schema import job_dependencies, jobs
from tests.api.conftest import Api, open_api

SIZE = 10_000


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[Api]:
    """The API on each engine, its requests' database budget raised: an operator's
    cancel of 10,000 jobs takes seconds, and more than the default 10 s (then a 503,
    nothing changed) on a machine at load 30."""
    async with open_api(database_url, api_db_timeout="5m") as opened:
        yield opened


async def post_batch(api: Api, jobs_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answer = await api.client.post("/v1/jobs/batch", json={"jobs": jobs_})
    assert answer.status_code == 201, answer.text
    return answer.json()["jobs"]


async def chain(api: Api, head: int, size: int) -> list[int]:
    """``size`` jobs, each after the one before it, the first after ``head``: stored as
    a POST stores them, written straight into the tables (a chain that long cannot be
    posted in one request, and 10,000 requests would cost minutes)."""
    made = await post_batch(api, [{"type": "ok"} for _ in range(size)])
    ids = [head] + [m["id"] for m in made]
    async with api.service.store.engine.begin() as conn:
        for start in range(1, len(ids), 500):
            part = range(start, min(start + 500, len(ids)))
            await conn.execute(
                insert(job_dependencies),
                [{"job_id": ids[i], "after_id": ids[i - 1], "outcome": None} for i in part],
            )
            await conn.execute(
                update(jobs)
                .where(jobs.c.id.in_([ids[i - 1] for i in part]))
                .values(has_dependents=True)
            )
        await conn.execute(
            update(jobs)
            .where(jobs.c.id == bindparam("b_id"))
            .values(
                after=bindparam("b_after"),
                after_failed="cancel",
                after_run_at=jobs.c.run_at,
                run_at=AFTER_PARKED,
                waiting_for=1,
                waiting_reason=bindparam("b_reason"),
            ),
            [
                {
                    "b_id": ids[i],
                    "b_after": [ids[i - 1]],
                    "b_reason": waiting_reason([ids[i - 1]], "cancel"),
                }
                for i in range(1, len(ids))
            ],
        )
    return ids[1:]


async def states(api: Api, ids: list[int]) -> dict[str, int]:
    async with api.service.store.engine.connect() as conn:
        rows = await conn.execute(
            select(jobs.c.state, func.count())
            .where(jobs.c.id.between(min(ids), max(ids)))
            .group_by(jobs.c.state)
        )
        return {state: count for state, count in rows}


async def end_head(api: Api, head: dict[str, Any], how: str) -> str:
    """End the head as ``how`` says: cancelled by an operator, or failed for good in
    its queue's tick. The state it ends in."""
    if how == "cancel":
        answer = await api.client.post(f"/v1/jobs/{head['id']}/cancel")
        assert answer.status_code == 200, answer.text
        return "cancelled"
    await api.tick(ticks=2)
    return "failed"


async def the_queue_runs_on(api: Api) -> None:
    after = await api.post_job(type="ok")
    await api.tick(ticks=2)
    assert (await api.job(after["id"]))["state"] == "completed"


@pytest.mark.parametrize("how", ["cancel", "fail"])
async def test_a_chain_of_10000_ends_with_its_head(api: Api, how: str) -> None:
    # Due, so that the "fail" case's tick runs it; the "cancel" case cancels it first.
    head = await api.post_job(type="permanent", retry={"strategy": "none"})
    ids = await chain(api, head["id"], SIZE)
    ended = await end_head(api, head, how)

    assert (await api.job(head["id"]))["state"] == ended
    assert await states(api, ids) == {"cancelled": SIZE}
    first, second, last = [await api.job(i) for i in (ids[0], ids[1], ids[-1])]
    assert first["last_error"] == f"job {head['id']} it runs after was {ended}"
    assert second["last_error"] == f"job {ids[0]} it runs after was cancelled"
    assert last["last_error"] == f"job {ids[-2]} it runs after was cancelled"
    assert (last["waiting_for"], last["waiting_reason"]) == (0, None)
    await the_queue_runs_on(api)


@pytest.mark.parametrize("how", ["cancel", "fail"])
async def test_a_fan_out_of_10000_in_one_request_ends_with_its_prerequisite(
    api: Api, how: str
) -> None:
    head = await api.post_job(type="permanent", retry={"strategy": "none"})
    fan = await post_batch(api, [{"type": "ok", "after": [head["id"]]} for _ in range(SIZE)])
    ids = [j["id"] for j in fan]
    waiting = await api.job(ids[-1])
    assert (waiting["state"], waiting["waiting_for"]) == ("scheduled", 1)
    # One of them runs anyway when the prerequisite fails.
    anyway = await api.post_job(type="ok", after=[head["id"]], after_failed="run")
    ended = await end_head(api, head, how)

    assert await states(api, ids) == {"cancelled": SIZE}
    last = await api.job(ids[-1])
    assert last["last_error"] == f"job {head['id']} it runs after was {ended}"
    await api.tick(ticks=2)
    assert (await api.job(anyway["id"]))["state"] == "completed"
    await the_queue_runs_on(api)
