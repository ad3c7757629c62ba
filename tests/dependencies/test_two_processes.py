"""Two hipq processes on one PostgreSQL: a job waits in a queue one of them runs for
a job in a queue the other runs; the finishing process's transaction releases it
through the database, and the other process's loop runs it; and a batch that both
processes add jobs to, whose completion job runs in the other process's queue."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from hipq.app import create_app
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


async def test_a_batch_joined_in_one_process_releases_its_completion_in_another(
    postgres_url_fresh: str,
) -> None:
    first = Service(api_settings(postgres_url_fresh, serve_queues=["default"]), owner="p1")
    second = Service(api_settings(postgres_url_fresh, serve_queues=["bulk"]), owner="p2")
    await first.start()
    await second.start()
    try:
        apps = [create_app(s, manage_service=False) for s in (first, second)]
        clients = [
            httpx.AsyncClient(transport=httpx.ASGITransport(a), base_url="http://localhost")
            for a in apps
        ]
        async with clients[0] as one, clients[1] as two:
            completion = {"type": "typed", "payload": {"order_id": 2}}
            made = (await one.post("/v1/batches", json={"on_complete": completion})).json()
            batch_id = made["id"]
            for client in (one, two):  # each process adds a job to it
                answer = await client.post("/v1/jobs", json={"type": "ok", "batch_id": batch_id})
                assert answer.status_code == 201, answer.text
            assert (await two.post(f"/v1/batches/{batch_id}/seal")).status_code == 200
            state = ""
            for _ in range(600):  # up to a minute on a loaded machine
                job = (await one.get(f"/v1/jobs/{made['completion_job_id']}")).json()
                state = job["state"]
                if state == "completed":
                    break
                await asyncio.sleep(0.1)
            assert state == "completed"
            assert job["payload"]["batch"]["total"] == 2
            batch = (await two.get(f"/v1/batches/{batch_id}")).json()
            assert (batch["status"], batch["completed"]) == ("finished", 2)
    finally:
        await second.stop()
        await first.stop()
