"""Upgrading an empty database to head gives exactly the tables, columns and indexes
that ``hipq.store.schema`` declares, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hipq.store import Store, migrations
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
