"""Upgrading an empty database to head gives exactly the tables, columns and indexes
that ``hipq.store.schema`` declares, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Column, MetaData, Table, inspect, select, update

from hipq.dependencies import AFTER_PARKED
from hipq.store import Store, migrations
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


async def _tables_now(store: Store, *tables: Table) -> list[Table]:
    """``tables`` with the columns the database has at its revision (today's may have
    more), each of today's type where it has one: hipq's own types (UTC instants, JSON)."""
    async with store.engine.connect() as conn:
        found = await conn.run_sync(
            lambda c: {t.name: inspect(c).get_columns(t.name) for t in tables}
        )
    return [
        Table(
            t.name,
            MetaData(),
            *(
                Column(c["name"], t.c[c["name"]].type if c["name"] in t.c else c["type"])
                for c in found[t.name]
            ),
        )
        for t in tables
    ]


def _job_at_0022(id: int, now: datetime, **fields: object) -> dict[str, object]:
    """A scheduled job's row as 0022 has it: its required columns, and ``fields``."""
    return {
        "id": id,
        "queue": "default",
        "type": "ok",
        "state": "scheduled",
        "payload": {},
        "labels": {},
        "retry": {},
        "run_at": now,
        "priority": 100,
        "weight": 1,
        "timeout_seconds": 86400.0,
        "critical": False,
        "attempt": 0,
        "created_at": now,
        "updated_at": now,
        "cancel_requested": False,
        **fields,
    }


async def test_a_batch_made_before_0024_finishes_after_it(empty_store: Store) -> None:
    """0022's batch, pending across the upgrade: its completion job, which waited for
    each job, waits for the batch, and runs once with the counts when it finishes."""
    await empty_store.schema_upgrade("0022")
    now = datetime.now(UTC)
    # The rows are 0022's, written into its tables: a column added since names nothing.
    old_batches, old_jobs, old_dependencies = await _tables_now(
        empty_store, batches, jobs, job_dependencies
    )
    members = [_job_at_0022(i, now, batch_id=1, has_dependents=True) for i in (1, 2)]
    completion = _job_at_0022(
        3,
        now,
        payload={"r": 1},
        notify=["hook"],
        after=[1, 2],
        after_failed="run",
        waiting_for=2,
        run_at=AFTER_PARKED,
        after_run_at=now,
    )
    async with empty_store.engine.begin() as conn:
        await conn.execute(
            old_batches.insert().values(
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
        await conn.execute(old_jobs.insert(), members)
        await conn.execute(old_jobs.insert().values(completion))
        await conn.execute(
            old_dependencies.insert(), [{"job_id": 3, "after_id": i} for i in (1, 2)]
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
