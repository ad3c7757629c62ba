"""Concurrent ``POST /v1/jobs`` share one insert transaction (group commit), and each
still gets its own answer: its own job, its own replay, its own 409."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hipq.store import Store
from hipq.store.dialects import PING_AFTER_IDLE_SECONDS
from tests.api.conftest import Api
from tests.support import eventually


def count_groups(api: Api) -> list[int]:
    """Record the size of every group the job writer stores."""
    sizes: list[int] = []
    store: Store = api.service.store
    insert_each = store.job_insert_each

    async def spy(requests: Any, now: Any) -> Any:
        sizes.append(len(requests))
        return await insert_each(requests, now)

    store.job_insert_each = spy  # type: ignore[method-assign]
    return sizes


async def post_all(api: Api, bodies: list[tuple[dict[str, Any], dict[str, str]]]) -> list[Any]:
    return await asyncio.gather(
        *(api.client.post("/v1/jobs", json=body, headers=headers) for body, headers in bodies)
    )


async def test_concurrent_posts_share_a_transaction_and_get_their_own_jobs(api: Api) -> None:
    sizes = count_groups(api)
    answers = await post_all(api, [({"type": "ok", "payload": {"i": i}}, {}) for i in range(20)])
    assert [a.status_code for a in answers] == [201] * 20
    assert [a.json()["payload"] for a in answers] == [{"i": i} for i in range(20)]
    assert len({a.json()["id"] for a in answers}) == 20
    assert await api.count_jobs() == 20
    assert sum(sizes) == 20 and max(sizes) > 1  # grouped: fewer transactions than requests


async def test_a_conflicting_post_gets_its_409_and_its_neighbours_their_201(api: Api) -> None:
    await api.post_job(type="ok", correlation_key="held")
    sizes = count_groups(api)
    bodies: list[tuple[dict[str, Any], dict[str, str]]] = [
        ({"type": "ok", "payload": {"i": i}}, {}) for i in range(9)
    ]
    bodies.insert(4, ({"type": "ok", "correlation_key": "held"}, {}))
    answers = await post_all(api, bodies)
    codes = [a.status_code for a in answers]
    assert codes == [201] * 4 + [409] + [201] * 5, [a.text for a in answers]
    assert answers[4].json()["field"] == "correlation_key"
    assert await api.count_jobs() == 10
    assert max(sizes) > 1


async def test_an_idempotency_key_replay_inside_a_group_returns_the_first_job(api: Api) -> None:
    sizes = count_groups(api)
    keyed = ({"type": "ok", "payload": {"k": 1}}, {"Idempotency-Key": "same"})
    bodies = [({"type": "ok"}, {}), keyed, keyed, ({"type": "ok"}, {}), keyed]
    answers = await post_all(api, bodies)
    assert [a.status_code for a in answers] == [201, 201, 200, 201, 200]
    first = answers[1].json()["id"]
    assert answers[2].json()["id"] == answers[4].json()["id"] == first
    assert answers[2].headers["Idempotent-Replayed"] == "true"
    assert await api.count_jobs() == 3
    assert max(sizes) > 1


async def test_job_keys_inside_a_group(api: Api) -> None:
    bodies = [({"type": "ok", "job_key": "k", "payload": {"v": v}}, {}) for v in range(4)]
    answers = await post_all(api, bodies)
    assert [a.status_code for a in answers] == [201] * 4
    assert len({a.json()["id"] for a in answers}) == 1
    job = await api.job(answers[0].json()["id"])
    assert job["payload"] == {"v": 3}


@pytest.mark.parametrize("idle", [False, True], ids=["at-once", "after-the-ping-delay"])
async def test_a_post_after_the_database_ended_its_connections_is_stored(
    api: Api, idle: bool
) -> None:
    # On PostgreSQL the single-job insert keeps its connection between requests
    # (hipq.store.held_connections): one the server ended is replaced, not reused;
    # one that idled past the ping delay is pinged first (a live one is kept).
    if api.service.store.dialect.name != "postgresql":
        await api.post_job(type="ok")
        await api.post_job(type="ok")
        assert await api.count_jobs() == 2
        return
    await api.post_job(type="ok", payload={"n": 1})
    if idle:
        await asyncio.sleep(PING_AFTER_IDLE_SECONDS + 0.2)
        await api.post_job(type="ok", payload={"n": 0})
        await asyncio.sleep(PING_AFTER_IDLE_SECONDS + 0.2)
    async with api.service.store.engine.connect() as conn:
        others = (
            "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        pids = (await conn.exec_driver_sql(f"SELECT array_agg(pid) {others}")).scalar_one()
        assert pids
        await conn.exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM unnest(CAST($1 AS int[])) AS pid", (pids,)
        )

        async def gone() -> bool:  # each backend ends after the call returns
            await conn.exec_driver_sql("SELECT pg_stat_clear_snapshot()")  # see it anew
            left = await conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(CAST($1 AS int[]))",
                (pids,),
            )
            return left.scalar_one() == 0

        await eventually(gone)
    for n in (2, 3):
        job = await api.post_job(type="ok", payload={"n": n})
        assert (await api.job(job["id"]))["payload"] == {"n": n}
    assert await api.count_jobs() == (4 if idle else 3)


async def test_a_caller_that_gives_up_leaves_its_group_to_be_written(api: Api) -> None:
    """A request cancelled while its group's transaction runs (its client went away)
    loses its own answer only: the transaction commits, its own job included, and
    the other requests of the group get theirs."""
    store: Store = api.service.store
    insert_each = store.job_insert_each
    writing, release = asyncio.Event(), asyncio.Event()

    async def held(requests: Any, now: Any) -> Any:
        writing.set()
        await release.wait()
        return await insert_each(requests, now)

    store.job_insert_each = held  # type: ignore[method-assign]
    writer, now = api.service.job_writer, api.service.clock()
    new = [api.service.intake.resolve({"type": "ok", "payload": {"i": i}}, now) for i in range(3)]
    first = asyncio.create_task(writer.insert([new[0]]))
    await asyncio.wait_for(writing.wait(), 30)
    # Two more wait for the next transaction; the first is given up mid-write.
    others = [asyncio.create_task(writer.insert([job])) for job in new[1:]]
    first.cancel()
    release.set()
    results = await asyncio.wait_for(asyncio.gather(*others), 30)
    assert [r.jobs[0].payload for r in results] == [{"i": 1}, {"i": 2}]
    with pytest.raises(asyncio.CancelledError):
        await first
    await writer.close()
    assert await api.count_jobs() == 3
