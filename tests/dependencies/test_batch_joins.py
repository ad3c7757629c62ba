"""Jobs that join a batch by its id, on both engines: an open batch that jobs join and
that is sealed, a sealed batch that jobs join while it runs, and the refusals (a batch
that finished, an unknown one); on PostgreSQL, joins from two connections at once and
a join that races the end of the batch's last job."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select, text

from hipq.jobs import NewJob
from hipq.store import Store
from hipq.store.batches import batch_join
from hipq.store.records import Conflict
from hipq.store.rows import job_from_new, new_row
from hipq.store.schema import jobs
from tests.api.conftest import Api, open_api
from tests.notifications.conftest import Receiver, notify_settings


async def batch(api: Api, batch_id: int) -> dict[str, Any]:
    answer = await api.client.get(f"/v1/batches/{batch_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()


async def post(api: Api, path: str, body: Any = None) -> dict[str, Any]:
    answer = await api.client.post(path, json=body)
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


async def test_an_open_batch_is_joined_then_sealed(api: Api) -> None:
    made = await post(api, "/v1/batches", {"on_complete": {"type": "record"}})
    batch_id = made["id"]
    assert (made["status"], made["total"], made["sealed_at"]) == ("open", 0, None)
    first = await post(api, "/v1/jobs", {"type": "ok", "batch_id": batch_id})
    assert first["batch_id"] == batch_id
    more = await post(
        api,
        "/v1/jobs/batch",
        {
            "jobs": [
                {"type": "ok", "batch_id": batch_id},
                {"type": "permanent", "batch_id": batch_id},
            ]
        },
    )
    assert [j["id"] for j in more["jobs"]] and (await batch(api, batch_id))["total"] == 3

    # Open: every job ends and the batch still does not finish, nor its completion run.
    await api.tick()
    counts = await batch(api, batch_id)
    assert (counts["pending"], counts["completed"], counts["failed"]) == (0, 2, 1)
    assert (counts["status"], counts["finished_at"]) == ("open", None)
    completion = counts["completion_job_id"]
    assert (await api.job(completion))["state"] == "scheduled"

    # A late job joins the open batch; sealing it then waits for that one.
    late = await post(api, "/v1/jobs", {"type": "ok", "batch_id": batch_id, "run_in": "1h"})
    sealed = await post(api, f"/v1/batches/{batch_id}/seal")
    assert (sealed["status"], sealed["pending"]) == ("sealed", 1)
    assert (await post(api, f"/v1/batches/{batch_id}/seal"))["sealed_at"] == sealed["sealed_at"]
    assert (await api.client.post(f"/v1/jobs/{late['id']}/cancel")).status_code == 200
    counts = await batch(api, batch_id)
    assert (counts["status"], counts["total"], counts["cancelled"]) == ("finished", 4, 1)
    await api.tick()
    done = await api.job(completion)
    assert done["state"] == "completed"
    assert done["payload"]["batch"] == {
        "id": batch_id,
        "total": 4,
        "completed": 2,
        "failed": 1,
        "cancelled": 1,
    }

    # Finished: a join is refused, naming the field, and nothing is stored.
    before = await api.count_jobs()
    answer = await api.client.post("/v1/jobs", json={"type": "ok", "batch_id": batch_id})
    assert answer.status_code == 409, answer.text
    assert answer.json()["field"] == "batch_id"
    assert f"batch {batch_id} finished at" in answer.json()["message"]
    body = {"jobs": [{"type": "ok"}, {"type": "ok", "batch_id": batch_id}]}
    answer = await api.client.post("/v1/jobs/batch", json=body)
    assert answer.status_code == 409 and answer.json()["field"] == "jobs[1].batch_id"
    assert await api.count_jobs() == before
    assert (await batch(api, batch_id))["total"] == 4


async def test_a_sealed_batch_is_joined_while_it_runs(api: Api) -> None:
    body = {"jobs": [{"type": "ok", "run_in": "1h"}], "batch": {"on_complete": {"type": "ok"}}}
    batch_id = (await post(api, "/v1/jobs/batch", body))["batch_id"]
    joined = await post(api, "/v1/jobs", {"type": "ok", "batch_id": batch_id})
    await api.tick()
    counts = await batch(api, batch_id)
    assert (counts["total"], counts["completed"], counts["status"]) == (2, 1, "sealed")
    assert (await api.job(joined["id"]))["batch_id"] == batch_id


async def test_an_empty_batch_sealed_finishes_at_once(api: Api) -> None:
    batch_id = (await post(api, "/v1/batches", {"on_complete": {"type": "ok"}}))["id"]
    sealed = await post(api, f"/v1/batches/{batch_id}/seal")
    assert (sealed["status"], sealed["total"]) == ("finished", 0)
    await api.tick()
    done = await api.job(sealed["completion_job_id"])
    assert done["state"] == "completed"
    assert done["payload"]["batch"]["total"] == 0


async def test_the_refusals_name_the_field(api: Api) -> None:
    answer = await api.client.post("/v1/jobs", json={"type": "ok", "batch_id": 999999})
    assert answer.status_code == 422, answer.text
    assert (answer.json()["field"], answer.json()["message"]) == (
        "batch_id",
        "batch_id: batch 999999 does not exist",
    )
    body = {"jobs": [{"type": "ok"}, {"type": "ok", "batch_id": 999999}]}
    answer = await api.client.post("/v1/jobs/batch", json=body)
    assert answer.status_code == 422 and answer.json()["field"] == "jobs[1].batch_id"
    for bad in (0, -1, "7", 2**63):
        answer = await api.client.post("/v1/jobs", json={"type": "ok", "batch_id": bad})
        assert answer.status_code == 422 and answer.json()["field"] == "batch_id", bad
    open_id = (await post(api, "/v1/batches", {}))["id"]
    body = {"jobs": [{"type": "ok", "batch_id": open_id}], "batch": {}}
    answer = await api.client.post("/v1/jobs/batch", json=body)
    assert answer.status_code == 422 and answer.json()["field"] == "jobs[0].batch_id"
    answer = await api.client.post("/v1/batches", json={"notify": ["nope"]})
    assert answer.status_code == 422 and answer.json()["field"] == "batch.notify[0]"
    answer = await api.client.post("/v1/batches", json={"on_complete": {"type": "nope"}})
    assert answer.status_code == 422 and answer.json()["field"] == "batch.on_complete.type"
    assert (await api.client.post("/v1/batches/999999/seal")).status_code == 404
    assert await api.count_jobs() == 0


async def test_batches_are_listed_newest_first(api: Api) -> None:
    ids = [(await post(api, "/v1/batches", {}))["id"] for _ in range(3)]
    page = (await api.client.get("/v1/batches", params={"limit": 2})).json()
    assert [b["id"] for b in page["batches"]] == ids[:0:-1]
    rest = await api.client.get("/v1/batches", params={"limit": 2, "cursor": page["next_cursor"]})
    assert [b["id"] for b in rest.json()["batches"]] == [ids[0]]
    assert rest.json()["next_cursor"] is None
    assert (await api.client.get("/v1/batches", params={"cursor": "x"})).status_code == 422

    jobs = [{"type": "ok", "batch_id": ids[1]} for _ in range(3)]
    made = [j["id"] for j in (await post(api, "/v1/jobs/batch", {"jobs": jobs}))["jobs"]]
    path = f"/v1/batches/{ids[1]}/jobs"
    page = (await api.client.get(path, params={"limit": 2})).json()
    assert [j["id"] for j in page["jobs"]] == made[:0:-1]
    assert all(j["batch_id"] == ids[1] for j in page["jobs"])
    rest = (await api.client.get(path, params={"cursor": page["next_cursor"]})).json()
    assert ([j["id"] for j in rest["jobs"]], rest["next_cursor"]) == ([made[0]], None)
    empty = (await api.client.get(f"/v1/batches/{ids[0]}/jobs")).json()
    assert empty == {"jobs": [], "next_cursor": None}
    assert (await api.client.get("/v1/batches/999999/jobs")).status_code == 404
    assert (await api.client.get("/v1/batches/0/jobs")).status_code == 422


async def test_an_open_batch_notifies_once_without_a_completion_job(database_url: str) -> None:
    receiver = Receiver()
    async with receiver.up(), open_api(database_url, **notify_settings(receiver)) as api:
        batch_id = (await post(api, "/v1/batches", {"notify": ["hook"]}))["id"]
        await post(api, "/v1/jobs", {"type": "ok", "batch_id": batch_id, "notify": []})
        await api.tick()
        await api.service.notifier.run_once()
        assert receiver.accepted() == []  # open: not finished
        await post(api, f"/v1/batches/{batch_id}/seal")
        await api.service.notifier.run_once()
        [told] = receiver.accepted()
        assert told["body"]["type"] == "batch.finished"
        assert told["body"]["data"]["batch_id"] == batch_id
        assert told["body"]["data"]["completed"] == 1
        listed = await api.client.get("/v1/notifications", params={"batch_id": batch_id})
        [row] = listed.json()["notifications"]
        assert (row["target"], row["status"], row["job_id"]) == ("hook", "sent", None)
        other = await api.client.get("/v1/notifications", params={"batch_id": batch_id + 1})
        assert other.json()["notifications"] == []
        page = (await api.client.get(f"/dashboard/batches/{batch_id}")).text
        assert '<tr data-target="hook"><td>hook</td><td class="status">sent</td>' in page


def _job(batch_id: int, n: int) -> NewJob:
    return NewJob("ok", "default", {"n": n}, datetime.now(UTC), batch_id=batch_id)


async def _count(store: Store, batch_id: int) -> int:
    async with store.engine.connect() as conn:
        query = select(func.count()).select_from(jobs).where(jobs.c.batch_id == batch_id)
        return int((await conn.execute(query)).scalar_one())


@pytest.mark.postgres
async def test_concurrent_joins_from_two_connections_count_every_job(
    postgres_url_fresh: str,
) -> None:
    first, second = Store.from_url(postgres_url_fresh), Store.from_url(postgres_url_fresh)
    try:
        async with open_api(postgres_url_fresh) as api:
            batch_id = (await post(api, "/v1/batches", {}))["id"]
        now = datetime.now(UTC)
        joins = [
            store.job_insert_many([_job(batch_id, n), _job(batch_id, n + 1)], now)
            for n in range(0, 40, 2)
            for store in (first, second)
        ]
        await asyncio.gather(*joins)
        made = await first.batch_get(batch_id)
        assert made.total == await _count(first, batch_id) == 80
    finally:
        await first.close()
        await second.close()


@pytest.mark.postgres
async def test_a_join_racing_the_last_jobs_end_is_refused(postgres_url_fresh: str) -> None:
    async with open_api(postgres_url_fresh) as api:
        body = {"jobs": [{"type": "ok", "run_in": "1h"}], "batch": {}}
        made = await post(api, "/v1/jobs/batch", body)
        batch_id, last = made["batch_id"], made["jobs"][0]["id"]
        joiner = Store.from_url(postgres_url_fresh)
        ending = api.service.store.engine.connect()
        conn = await ending.__aenter__()
        try:
            # The last job ends in a transaction not committed yet: its trigger holds
            # the batch's row and has finished the batch.
            await conn.execute(
                text("UPDATE hipq_jobs SET state = 'cancelled', updated_at = now() WHERE id = :i"),
                {"i": last},
            )
            join = asyncio.create_task(
                joiner.job_insert_many([_job(batch_id, 1)], datetime.now(UTC))
            )
            await _until_waiting_for_a_lock(api)
            await conn.commit()
            with pytest.raises(Conflict) as refused:
                await join
            assert refused.value.field == "batch_id"
            assert await _count(joiner, batch_id) == 1  # the join left nothing
            finished = await joiner.batch_get(batch_id)
            assert (finished.total, finished.cancelled, finished.status) == (1, 1, "finished")
        finally:
            await ending.__aexit__(None, None, None)
            await joiner.close()


async def _until_waiting_for_a_lock(api: Api) -> None:
    """Until some session of the database waits for a row lock (the join, blocked)."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND datname = current_database()"
    )
    for _ in range(3000):  # a passing test waits far less; a loaded machine may be slow
        async with api.service.store.engine.connect() as conn:
            if (await conn.execute(query)).scalar_one():
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the join never waited for the batch's row")


async def test_a_schedules_job_template_does_not_join_a_batch(api: Api) -> None:
    # Every fire would join, and every fire after the batch finished would be refused.
    batch_id = (await post(api, "/v1/batches", {}))["id"]
    schedule = {"name": "feed", "cron": "0 3 * * *", "job": {"type": "ok", "batch_id": batch_id}}
    answer = await api.client.post("/v1/schedules", json=schedule)
    assert answer.status_code == 422 and answer.json()["field"] == "job.batch_id"


async def test_a_batch_counts_a_job_cancelled_at_once_and_one_found_by_its_key(api: Api) -> None:
    failed = await post(api, "/v1/jobs", {"type": "permanent"})
    await api.tick()
    keyed = await post(api, "/v1/jobs", {"type": "ok", "job_key": "k", "run_in": "1h"})
    jobs = [
        {"type": "ok", "after": [failed["id"]]},  # cancelled as it is stored
        {"type": "ok", "job_key": "k", "job_key_mode": "unsafe_dedupe"},  # the open one
    ]
    for joining in (None, (await post(api, "/v1/batches", {}))["id"]):
        if joining is None:
            made = await post(api, "/v1/jobs/batch", {"jobs": jobs, "batch": {}})
        else:
            second = [{**j, "batch_id": joining} for j in jobs]
            made = await post(api, "/v1/jobs/batch", {"jobs": second})
        batch_id = made["batch_id"] if joining is None else joining
        counts = await batch(api, batch_id)
        if joining is None:  # the keyed job joined the first batch, and stays in it
            assert made["jobs"][1]["id"] == keyed["id"]
            assert (counts["total"], counts["cancelled"], counts["pending"]) == (2, 1, 1)
            assert (await api.job(keyed["id"]))["batch_id"] == batch_id
        else:
            assert (counts["total"], counts["cancelled"], counts["pending"]) == (1, 1, 0)


@pytest.mark.postgres
async def test_the_last_jobs_end_racing_a_join_waits_for_it(postgres_url_fresh: str) -> None:
    async with open_api(postgres_url_fresh) as api:
        body = {"jobs": [{"type": "ok", "run_in": "1h"}], "batch": {}}
        made = await post(api, "/v1/jobs/batch", body)
        batch_id, last = made["batch_id"], made["jobs"][0]["id"]
        joining = Store.from_url(postgres_url_fresh)
        try:
            async with joining.engine.connect() as conn:
                # A join not committed yet: it holds the batch's row, its job counted.
                now = datetime.now(UTC)
                row = new_row(_job(batch_id, 1), now) | {"batch_id": None}
                (job_id,) = await joining.dialect.job_insert_rows(conn, [row])
                stored = job_from_new(job_id, row)
                await batch_join(conn, batch_id, [stored], "batch_id")
                end = asyncio.create_task(api.client.post(f"/v1/jobs/{last}/cancel"))
                await _until_waiting_for_a_lock(api)
                await conn.commit()
            assert (await end).status_code == 200
            counts = await batch(api, batch_id)
            assert (counts["total"], counts["cancelled"], counts["pending"]) == (2, 1, 1)
            assert counts["status"] == "sealed"  # it waits for the job that joined
        finally:
            await joining.close()
