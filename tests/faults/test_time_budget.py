"""A request waits for the database at most ``api_db_timeout``, then answers 503; the
client's retry with the same Idempotency-Key then stores the job exactly once."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url

from hipq.store.process_guard import asyncpg_connect_kwargs
from tests.api.conftest import open_api

KEY = {"Idempotency-Key": "order-17"}


@pytest.mark.postgres
async def test_a_locked_jobs_table_is_503_and_the_retry_stores_one_job(
    postgres_url_fresh: str,
) -> None:
    async with open_api(postgres_url_fresh, api_db_timeout="0.5s") as api:
        holder = await asyncpg.connect(**asyncpg_connect_kwargs(postgres_url_fresh))
        try:
            locked = holder.transaction()
            await locked.start()
            await holder.execute("LOCK TABLE hipq_jobs IN ACCESS EXCLUSIVE MODE")
            refused = await asyncio.wait_for(
                api.client.post("/v1/jobs", json={"type": "ok"}, headers=KEY), 20
            )
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "database_unavailable"
            assert "retry-after" in refused.headers
            ready = await asyncio.wait_for(api.client.get("/readyz"), 20)
            assert ready.status_code == 503, ready.text
            await locked.rollback()
        finally:
            await holder.close()
        again = await api.client.post("/v1/jobs", json={"type": "ok"}, headers=KEY)
        assert again.status_code == 201, again.text
        repeated = await api.client.post("/v1/jobs", json={"type": "ok"}, headers=KEY)
        assert repeated.json()["id"] == again.json()["id"]
        assert await api.count_jobs() == 1


async def test_a_sqlite_write_lock_held_elsewhere_is_503_within_the_budget(
    sqlite_url: str,
) -> None:
    async with open_api(sqlite_url, api_db_timeout="0.3s") as api:
        path = Path(str(make_url(sqlite_url).database))
        # Waits (up to 30 s, not sqlite3's 5) for a write the service's start-up may
        # still have under way on a loaded machine; the budget is what is tested here.
        # The wait runs in a thread: on the event loop it would block the very write
        # it waits for (aiosqlite's COMMIT is sent from the loop).
        holder = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
        try:
            await asyncio.to_thread(holder.execute, "BEGIN IMMEDIATE")
            # Without a budget this waited for SQLite's 30 s busy timeout.
            refused = await asyncio.wait_for(
                api.client.post("/v1/jobs", json={"type": "ok"}, headers=KEY), 10
            )
            assert refused.status_code == 503, refused.text
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        again = await api.client.post("/v1/jobs", json={"type": "ok"}, headers=KEY)
        assert again.status_code == 201, again.text
        assert await api.count_jobs() == 1


@pytest.mark.postgres
async def test_a_plain_post_behind_a_locked_jobs_table_is_503_within_the_budget(
    postgres_url_fresh: str,
) -> None:
    # Without a key the insert is one statement outside a transaction (group commit's
    # fast path): the budget must bound it as well.
    async with open_api(postgres_url_fresh, api_db_timeout="0.5s") as api:
        holder = await asyncpg.connect(**asyncpg_connect_kwargs(postgres_url_fresh))
        try:
            locked = holder.transaction()
            await locked.start()
            await holder.execute("LOCK TABLE hipq_jobs IN ACCESS EXCLUSIVE MODE")
            refused = await asyncio.wait_for(api.client.post("/v1/jobs", json={"type": "ok"}), 20)
            assert refused.status_code == 503, refused.text
            await locked.rollback()
        finally:
            await holder.close()
        assert await api.count_jobs() == 0
        again = await api.client.post("/v1/jobs", json={"type": "ok"})
        assert again.status_code == 201, again.text
        assert await api.count_jobs() == 1


@pytest.mark.postgres
async def test_a_read_is_bounded_by_the_budget_and_the_loops_transactions_are_not(
    postgres_url_fresh: str,
) -> None:
    # The API's transactions have a pool of their own whose sessions keep the budget
    # set; a transaction outside any budget (the loops', upkeep's) must not inherit it.
    async with open_api(postgres_url_fresh, api_db_timeout="0.5s") as api:
        created = await api.client.post("/v1/jobs", json={"type": "ok"})
        assert created.status_code == 201, created.text
        job_id = created.json()["id"]
        assert (await api.client.get(f"/v1/jobs/{job_id}")).status_code == 200
        holder = await asyncpg.connect(**asyncpg_connect_kwargs(postgres_url_fresh))
        try:
            locked = holder.transaction()
            await locked.start()
            await holder.execute("LOCK TABLE hipq_jobs IN ACCESS EXCLUSIVE MODE")
            unbounded = asyncio.ensure_future(api.service.store.job_get(job_id))
            refused = await asyncio.wait_for(api.client.get(f"/v1/jobs/{job_id}"), 20)
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "database_unavailable"
            await asyncio.sleep(0.6)  # past the budget: the unbounded read still waits
            assert not unbounded.done()
            await locked.rollback()
        finally:
            await holder.close()
        job = await asyncio.wait_for(unbounded, 20)
        assert job.id == job_id
        again = await api.client.get(f"/v1/jobs/{job_id}")
        assert again.status_code == 200, again.text
