"""Fixtures of the database fault tests: a proxy in front of PostgreSQL that a test cuts,
and a SQLite file per test."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.faults.proxy import TcpProxy


@pytest.fixture
async def proxy(postgres_url_fresh: str) -> AsyncIterator[TcpProxy]:
    """A started proxy in front of the test database (``proxy.url(postgres_url_fresh)``)."""
    proxy = TcpProxy.for_url(postgres_url_fresh)
    await proxy.start()
    yield proxy
    await proxy.close()


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    path = tmp_path / "hipq.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"
