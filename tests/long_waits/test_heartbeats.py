"""Heartbeats from the external system: a loopback peer takes hipq's request, keeps
the job for longer than its timeout while it heartbeats (signed, with progress),
and stops; hipq's loop moves the deadline, then fails the silent attempt."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest

from hipq.security.signatures import signature_headers
from hipq.service import Service
from tests.external.test_http_callbacks import running_hipq
from tests.peers import CallbackService, free_port, serve_app
from tests.support import eventually, make_settings

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def settings_for(database_url: str, external: str) -> Any:
    long = {
        "correlation_key": "{payload.order_id}",
        "timeout": "3s",  # how long the first sign of life may take
        "heartbeat_timeout": "3s",
        "retry": {"strategy": "fixed", "delay": "50ms", "max_attempts": 2},
        "outcome": {"field": "status", "success": ["ok"]},
        "callback_signature": {"secret": SECRET},
        "transport": {"http": {"url": f"{external}/charges", "timeout": "5s"}},
    }
    silent = {**long, "timeout": "60s", "heartbeat_timeout": "500ms"}
    plain = {k: v for k, v in long.items() if k not in ("heartbeat_timeout",)}
    return make_settings(
        database_url,
        job_types={"long": long, "silent": silent, "plain": plain},
        server={"host": "127.0.0.1", "port": free_port()},
        queues={"default": {"batch_interval": "100ms"}},
    )


@dataclass
class World:
    api: httpx.AsyncClient
    service: Service
    peer: CallbackService

    async def post(self, type: str, order_id: str, **job: Any) -> dict[str, Any]:
        body = {"type": type, "payload": {"order_id": order_id, "behavior": "hold"}, **job}
        response = await self.api.post("/v1/jobs", json=body)
        assert response.status_code == 201, response.text
        return response.json()

    async def job(self, job_id: int) -> dict[str, Any]:
        return (await self.api.get(f"/v1/jobs/{job_id}")).json()

    def heartbeat_url(self, key: str) -> str:
        path, _, query = self.peer.held[key].partition("?")
        return f"{path}/heartbeat?{query}"

    async def heartbeat(self, url: str, body: Any = None, signed: bool = True) -> httpx.Response:
        if signed and (body is None or isinstance(body, dict)):
            # A signed heartbeat carries its key (callback_signature.key's default).
            key = url.partition("/v1/callbacks/")[2].partition("/heartbeat")[0]
            body = {"correlation_key": key, **(body or {})}
        raw = b"" if body is None else orjson.dumps(body)
        headers = {"content-type": "application/json"}
        if signed:
            headers |= sign(raw)
        return await self.api.post(url, content=raw, headers=headers)


def sign(raw: bytes) -> dict[str, str]:
    return signature_headers(SECRET, f"msg-{uuid.uuid4()}", int(time.time()), raw)


@pytest.fixture
async def world(database_url: str) -> AsyncIterator[World]:
    peer = CallbackService(seed=5)
    async with serve_app(peer.app) as ext:
        async with running_hipq(settings_for(database_url, ext)) as (service, api):
            yield World(api, service, peer)
    await peer.close()


async def test_heartbeats_keep_a_job_alive_past_its_timeout(world: World) -> None:
    job = await world.post("long", "hb-1")
    await eventually(lambda: "hb-1" in world.peer.held, timeout=60)
    url = world.heartbeat_url("hb-1")
    started = datetime.now(UTC)
    # Heartbeats for well over the 3 s timeout; each moves the deadline 3 s ahead.
    for done in range(16):
        answer = await world.heartbeat(url, {"progress": {"done": done, "of": 16}})
        assert answer.status_code == 202, answer.text
        assert answer.json()["attempt"] == 1
        await asyncio.sleep(0.3)
    assert datetime.now(UTC) - started > timedelta(seconds=4)
    seen = await world.job(job["id"])
    assert (seen["state"], seen["attempt"]) == ("awaiting", 1), seen
    assert seen["heartbeat"]["progress"] == {"done": 15, "of": 16}
    assert seen["heartbeat"]["attempt"] == 1
    # The loop persisted the moved deadline: past the one the claim set.
    claimed = datetime.fromisoformat(seen["claimed_at"])
    assert datetime.fromisoformat(seen["deadline"]) > claimed + timedelta(seconds=4)
    # A heartbeat without a body keeps the last progress.
    assert (await world.heartbeat(url)).status_code == 202
    assert (await world.job(job["id"]))["heartbeat"]["progress"] == {"done": 15, "of": 16}
    # The peer's answer, signed as the job type requires.
    raw = orjson.dumps({"status": "ok", "order_id": "hb-1", "correlation_key": "hb-1"})
    callback = world.peer.held.pop("hb-1")
    headers = {"content-type": "application/json", **sign(raw)}
    assert (await world.api.post(callback, content=raw, headers=headers)).status_code == 202

    async def completed() -> dict[str, Any] | None:
        seen = await world.job(job["id"])
        return seen if seen["state"] == "completed" else None

    done = await eventually(completed, timeout=60)
    assert [a["outcome"] for a in done["attempts"]] == ["completed"]


async def test_silence_fails_the_attempt_and_the_retry_strategy_decides(world: World) -> None:
    job = await world.post("silent", "hb-2")  # timeout 60 s, heartbeat_timeout 500 ms
    await eventually(lambda: "hb-2" in world.peer.held, timeout=60)
    url = world.heartbeat_url("hb-2")
    assert (await world.heartbeat(url, {"progress": "started"})).status_code == 202

    async def retried() -> dict[str, Any] | None:
        seen = await world.job(job["id"])
        return seen if seen["attempt"] == 2 else None

    # Far sooner than its 60 s timeout: the heartbeat's deadline was 500 ms ahead.
    seen = await eventually(retried, timeout=60, interval=0.1)
    first = seen["attempts"][0]
    assert first["outcome"] == "retried"
    assert first["error"].startswith("timed out"), first["error"]
    # The first attempt's heartbeat stays visible, and says which attempt it was for.
    assert seen["heartbeat"]["attempt"] == 1
    assert seen["heartbeat"]["progress"] == "started"


async def test_refused_heartbeats_name_the_problem(world: World) -> None:
    await world.post("long", "hb-3")
    await eventually(lambda: "hb-3" in world.peer.held, timeout=60)
    url = world.heartbeat_url("hb-3")
    unsigned = await world.heartbeat(url, {"progress": 1}, signed=False)
    assert unsigned.status_code == 401
    assert unsigned.json()["errors"][0]["field"] == "webhook-signature"
    cases = [
        ("/v1/callbacks/hb-3/heartbeat", 422, "type"),
        ("/v1/callbacks/hb-3/heartbeat?type=nope", 422, "type"),
        ("/v1/callbacks/nobody/heartbeat?type=long", 404, "key"),
    ]
    for path, status, field in cases:
        answer = await world.heartbeat(path, {"progress": 1})
        assert answer.status_code == status, (path, answer.text)
        assert answer.json()["errors"][0]["field"] == field, (path, answer.text)
    big = await world.heartbeat(url, {"progress": "x" * 5000})
    assert big.status_code == 422 and big.json()["errors"][0]["field"] == "progress", big.text
    answer = await world.heartbeat(url, [1, 2])
    assert answer.status_code == 422 and answer.json()["errors"][0]["field"] == "body"
    # A type without heartbeat_timeout takes none.
    plain = await world.heartbeat("/v1/callbacks/hb-3/heartbeat?type=plain", {"progress": 1})
    assert plain.status_code == 422 and "no heartbeat_timeout" in plain.text
    # A job not yet in flight: 409.
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    await world.post("long", "hb-4", run_at=later)
    waiting = await world.heartbeat("/v1/callbacks/hb-4/heartbeat?type=long", {"progress": 1})
    assert waiting.status_code == 409, waiting.text
    # Nothing of the refused ones was stored.
    seen = (await world.api.get("/v1/jobs", params={"type": "long"})).json()
    assert all(j.get("heartbeat") is None for j in seen["jobs"])
