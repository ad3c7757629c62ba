"""Fixtures: a fresh, migrated database per test on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hipq.store import Store
from tests import handlers
from tests.services import create_database_sync, drop_database_sync, unique_database_name

pytest_plugins = ["tests.services"]


def _migrate(url: str) -> None:
    async def run() -> None:
        store = Store.from_url(url)
        try:
            await store.schema_upgrade()
        finally:
            await store.close()

    # Session fixtures may be first requested from inside a running event loop.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "hipq.db"
    _migrate(f"sqlite+aiosqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """One migrated database for the session; each test starts from empty tables."""
    name = unique_database_name()
    url = create_database_sync(postgres_admin_url, name)
    _migrate(url)
    yield url
    drop_database_sync(postgres_admin_url, name)


async def _truncate(url: str) -> None:
    store = Store.from_url(url)
    try:
        await store.tables_empty()
    finally:
        await store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh migrated database, once per engine."""
    if request.param == "sqlite":
        path = tmp_path / "hipq.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite+aiosqlite:///{path}"
    else:
        url = request.getfixturevalue("postgres_url")
        await _truncate(url)
        yield url


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s = Store.from_url(database_url)
    yield s
    await s.close()


@pytest.fixture(autouse=True)
def _clean_handlers() -> None:
    handlers.SEEN.clear()
    handlers.RUNNING.clear()


@pytest.fixture
async def postgres_url_fresh(postgres_url: str) -> AsyncIterator[str]:
    """The session's PostgreSQL database, emptied (for tests that only make sense there)."""
    await _truncate(postgres_url)
    yield postgres_url
