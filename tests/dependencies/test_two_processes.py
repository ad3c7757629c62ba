"""Two hipq processes on one PostgreSQL: a job waits in a queue one of them runs for
a job in a queue the other runs; the finishing process's transaction releases it
through the database, and the other process's loop runs it."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from hipq.api.app import create_app
from hipq.service import Service
from tests.api.conftest import api_settings

pytestmark = pytest.mark.postgres


async def test_a_job_in_another_process_queue_is_released(postgres_url_fresh: str) -> None:
    first = Service(api_settings(postgres_url_fresh, serve_queues=["default"]), owner="p1")
    second = Service(api_settings(postgres_url_fresh, serve_queues=["bulk"]), owner="p2")
    await first.start()
    await second.start()
    try:
        app = create_app(first, manage_service=False)
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            jobs = [
                {"type": "ok", "job_key": "extract", "run_in": "1s"},
                {"type": "typed", "payload": {"order_id": 1}, "after": ["extract"]},
            ]
            answer = await client.post("/v1/jobs/batch", json={"jobs": jobs})
            assert answer.status_code == 201, answer.text
            made = [j["id"] for j in answer.json()["jobs"]]
            states: list[str] = []
            for _ in range(600):  # up to a minute on a loaded machine
                states = [(await client.get(f"/v1/jobs/{i}")).json()["state"] for i in made]
                if states == ["completed", "completed"]:
                    break
                await asyncio.sleep(0.1)
            assert states == ["completed", "completed"]
            assert second.loops["bulk"].token is not None  # the second process ran it
    finally:
        await second.stop()
        await first.stop()
