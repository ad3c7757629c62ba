"""Fixtures of the attacker's-eye tests: hipq under uvicorn on loopback, next to a real
external HTTP service that calls back when the test says so."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from hipq.service import Service
from tests.external.test_http_callbacks import running_hipq
from tests.peers import CallbackService, free_port, serve_app
from tests.support import eventually, make_settings

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def charge_types(external: str) -> dict[str, Any]:
    charge = {
        "correlation_key": "{payload.order_id}",
        "timeout": "120s",  # generous: tests check that a job still waits
        "retry": {"strategy": "none"},
        "outcome": {"field": "status", "success": ["ok"]},
        "transport": {"http": {"url": f"{external}/charges", "timeout": "5s"}},
    }
    signed = {**charge, "callback_signature": {"secret": SECRET}}
    return {
        "charge": charge,
        "charge_signed": signed,
        "charge_signed_late": {**signed, "timeout": "1s", "late_responses": "accept"},
        "charge_beats": {**signed, "timeout": "30s", "heartbeat_timeout": "30s"},
    }


@dataclass
class World:
    api: httpx.AsyncClient
    service: Service
    external: CallbackService

    async def post(self, type: str, **payload: Any) -> dict[str, Any]:
        response = await self.api.post("/v1/jobs", json={"type": type, "payload": payload})
        assert response.status_code == 201, response.text
        return response.json()

    async def state(self, job_id: int) -> str:
        return (await self.api.get(f"/v1/jobs/{job_id}")).json()["state"]

    async def reaches(self, job_id: int, state: str) -> None:
        async def there() -> bool:
            return await self.state(job_id) == state

        await eventually(there, timeout=60)


@pytest.fixture
async def world(database_url: str) -> AsyncIterator[World]:
    external = CallbackService(seed=5)
    async with serve_app(external.app) as ext:
        settings = make_settings(
            database_url,
            job_types=charge_types(ext),
            server={"host": "127.0.0.1", "port": free_port()},
            queues={"default": {"batch_interval": "100ms"}},
        )
        async with running_hipq(settings) as (service, api):
            yield World(api, service, external)
    await external.close()
