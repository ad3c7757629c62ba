"""Upgrading an empty database to head gives exactly the tables, columns and indexes
that ``hipq.store.schema`` declares, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import inspect, select, update

from hipq.dependencies import AFTER_PARKED
from hipq.jobs import NewJob
from hipq.store import Store, migrations
from hipq.store.rows import new_row
from hipq.store.schema import batches, job_dependencies, jobs
from tests.services import create_database_sync, drop_database_sync, unique_database_name


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def empty_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """A store on a database without any table."""
    if request.param == "sqlite":
        store = Store.from_url(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")
        yield store
        await store.close()
        return
    admin = request.getfixturevalue("postgres_admin_url")
    name = unique_database_name("hipq_migrate")
    store = Store.from_url(create_database_sync(admin, name))
    try:
        yield store
    finally:
        await store.close()
        drop_database_sync(admin, name)


async def test_upgrade_to_head_gives_the_declared_schema(empty_store: Store) -> None:
    assert await empty_store.schema_revision() is None
    assert await empty_store.schema_upgrade() == migrations.head_revision()
    assert await empty_store.schema_differences() == []


async def test_a_schema_one_migration_behind_differs(empty_store: Store) -> None:
    # The comparison sees what the last migration changes (the due scan's indexes).
    await empty_store.schema_upgrade("0003")
    differences = await empty_store.schema_differences()
    assert any("ix_hipq_jobs_due" in str(d) for d in differences), differences


async def test_a_batch_made_before_0024_finishes_after_it(empty_store: Store) -> None:
    """0022's batch, pending across the upgrade: its completion job, which waited for
    each job, waits for the batch, and runs once with the counts when it finishes."""
    await empty_store.schema_upgrade("0022")
    now = datetime.now(UTC)
    members = [
        {**new_row(NewJob("ok", "default", {}, now, batch_id=1), now), "id": i} for i in (1, 2)
    ]
    for row in members:
        row["has_dependents"] = True
    completion = {
        **new_row(NewJob("ok", "default", {"r": 1}, now, notify=["hook"]), now),
        "id": 3,
        "after": [1, 2],
        "after_failed": "run",
        "waiting_for": 2,
        "run_at": AFTER_PARKED,
        "after_run_at": now,
    }
    async with empty_store.engine.begin() as conn:
        # 0022's columns only: the rows as its schema holds them, read from the database.
        columns = set(
            await conn.run_sync(
                lambda c: [col["name"] for col in inspect(c).get_columns("hipq_jobs")]
            )
        )
        members = [{k: v for k, v in row.items() if k in columns} for row in members]
        completion = {k: v for k, v in completion.items() if k in columns}
        await conn.execute(
            batches.insert().values(
                id=1,
                total=2,
                completed=0,
                failed=0,
                cancelled=0,
                on_complete="ok",
                completion_job_id=3,
                notify=["hook"],
                created_at=now,
            )
        )
        await conn.execute(jobs.insert(), members)
        await conn.execute(jobs.insert().values(completion))
        await conn.execute(
            job_dependencies.insert(), [{"job_id": 3, "after_id": i} for i in (1, 2)]
        )
    await empty_store.schema_upgrade()
    made = await empty_store.batch_get(1)
    assert (made.status, made.notify) == ("sealed", None)  # told of by its completion job
    async with empty_store.engine.begin() as conn:
        await conn.execute(
            update(jobs).where(jobs.c.id == 1).values(state="completed", updated_at=now)
        )
        waiting = (await conn.execute(select(jobs).where(jobs.c.id == 3))).one()
        assert (waiting.waiting_for, waiting.run_at) == (1, AFTER_PARKED)
        await conn.execute(
            update(jobs).where(jobs.c.id == 2).values(state="failed", updated_at=now)
        )
    released = await empty_store.job_get(3)
    assert (released.state, released.waiting_for, released.run_at) == ("scheduled", 0, now)
    assert released.payload == {
        "r": 1,
        "batch": {"id": 1, "total": 2, "completed": 1, "failed": 1, "cancelled": 0},
    }
    assert (await empty_store.batch_get(1)).status == "finished"
