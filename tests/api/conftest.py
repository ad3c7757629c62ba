"""Fixtures of the API tests: a started Service behind its app, and an httpx client on it.

The service runs without its loops (``run_loops=False``) and on a ``FakeClock``: a test
drives a queue's ticks itself (``api.tick()``) and moves time by hand.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from hipq.app import create_app
from hipq.batch_loop.loop import QueueLoop
from hipq.config import Settings
from hipq.service import Service
from hipq.store.schema import jobs
from tests.support import FakeClock, make_settings

# A job type whose every default differs from the built-in ones, in a second queue.
TYPED = {
    "queue": "bulk",
    "priority": 7,
    "weight": 3,
    "timeout": "90s",
    "retry": {"strategy": "fixed", "delay": "5s", "max_attempts": 2},
    "correlation_key": "order-{payload.order_id}",
    "transport": {"python": {"handler": "tests.handlers:ok"}},
}
QUEUES = {
    "default": {"concurrency": 10},
    "bulk": {"order": "priority_time", "batch_size": 500, "batch_interval": "2s"},
}


def api_settings(database_url: str, **overrides: Any) -> Settings:
    job_types = {"typed": TYPED, **overrides.pop("job_types", {})}
    overrides.setdefault("queues", QUEUES)
    return make_settings(database_url, job_types=job_types, **overrides)


@dataclass
class Api:
    service: Service
    client: httpx.AsyncClient
    clock: FakeClock

    def loop(self, queue: str = "default") -> QueueLoop:
        return self.service.loops[queue]

    async def tick(self, queue: str = "default", ticks: int = 3) -> None:
        """Run the queue's loop a few ticks, letting python handlers finish in between."""
        loop = self.loop(queue)
        if loop.token is None:
            assert await loop.acquire()
        for _ in range(ticks):
            await loop.run_once()
            await asyncio.sleep(0.01)

    async def post_job(self, **fields: Any) -> dict[str, Any]:
        response = await self.client.post("/v1/jobs", json=fields)
        assert response.status_code == 201, response.text
        return response.json()

    async def job(self, job_id: int) -> dict[str, Any]:
        response = await self.client.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        return response.json()

    async def count_jobs(self) -> int:
        async with self.service.store.engine.connect() as conn:
            return (await conn.execute(select(func.count()).select_from(jobs))).scalar_one()


@asynccontextmanager
async def open_api(
    database_url: str,
    *,
    run_loops: bool = False,
    clock: FakeClock | None = None,
    **overrides: Any,
) -> AsyncIterator[Api]:
    clock = clock or FakeClock()
    service = Service(api_settings(database_url, **overrides), clock=clock, run_loops=run_loops)
    await service.start()
    app = create_app(service, manage_service=False)
    transport = httpx.ASGITransport(app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield Api(service, client, clock)
    finally:
        await service.stop()


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[Api]:
    """The API on each engine (for tests that touch storage)."""
    async with open_api(database_url) as opened:
        yield opened


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    path = tmp_path / "hipq.db"
    shutil.copy(sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture
async def sqlite_api(sqlite_url: str) -> AsyncIterator[Api]:
    """The API on SQLite only, for input validation that never reaches the database."""
    async with open_api(sqlite_url) as opened:
        yield opened
