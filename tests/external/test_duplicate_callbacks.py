"""A callback delivered twice under a per-job correlation key, through the real
webhook: the copy of attempt 1's failure must not settle attempt 2."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.external.test_http_callbacks import running_hipq, settings_for
from tests.peers import free_port, serve_app
from tests.support import eventually


class RedeliveringService:
    """Declines a key's first request; when the second comes, it first redelivers the
    first callback (a sender's retry that arrives late), then approves."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.client = httpx.AsyncClient(timeout=30)
        self.tasks: set[asyncio.Task[None]] = set()
        self.app = Starlette(routes=[Route("/charges", self._charge, methods=["POST"])])

    async def _charge(self, request: Request) -> JSONResponse:
        key = str((await request.json())["order_id"])
        url = request.headers["x-callback-url"]
        self.requests[key] += 1
        declined = {"status": "declined", "order_id": key}
        bodies = [declined] if self.requests[key] == 1 else [declined, {"status": "ok"}]
        task = asyncio.create_task(self._call_back(url, bodies))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return JSONResponse({"accepted": True}, 202)

    async def _call_back(self, url: str, bodies: list[dict[str, Any]]) -> None:
        for body in bodies:  # one after the other: the copy is stored first
            (await self.client.post(url, json=body)).raise_for_status()

    async def close(self) -> None:
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.client.aclose()


async def test_a_redelivered_failure_does_not_fail_the_next_attempt(database_url: str) -> None:
    external = RedeliveringService()
    async with serve_app(external.app) as ext:
        settings = settings_for(database_url, ext, free_port())
        async with running_hipq(settings) as (service, api):
            posted = await api.post(
                "/v1/jobs", json={"type": "charge_twice", "payload": {"order_id": "re-1"}}
            )
            assert posted.status_code == 201, posted.text
            job_id = posted.json()["id"]

            async def finished() -> dict[str, Any] | None:
                job = (await api.get(f"/v1/jobs/{job_id}")).json()
                return job if job["state"] in ("completed", "failed") else None

            job = await eventually(finished, timeout=60, interval=0.1)
            await external.close()
            await service.upkeep.run_once()
            listed = (await api.get("/v1/responses", params={"key": "re-1"})).json()
    assert job["state"] == "completed", job
    assert job["result"] == {"status": "ok"}
    assert [a["outcome"] for a in job["attempts"]] == ["retried", "completed"]
    statuses = [r["status"] for r in reversed(listed["responses"])]
    assert statuses == ["matched", "duplicate", "matched"]
