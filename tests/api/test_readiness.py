"""hipq keeps serving while a peer is down, and /readyz says what is not ready."""

from __future__ import annotations

import httpx

from hipq.app import create_app
from hipq.service import Service
from tests.peers import free_port
from tests.support import eventually, make_settings


async def test_readyz_names_a_kafka_broker_that_is_down_and_jobs_are_still_accepted(
    sqlite_url: str,
) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens here
    settings = make_settings(
        sqlite_url,
        job_types={
            "send": {
                "correlation_key": "{payload.id}",
                "transport": {"kafka": {"topic": "requests"}},
            }
        },
        kafka={"bootstrap_servers": dead},
    )
    service = Service(settings)
    await service.start()
    try:
        transport = httpx.ASGITransport(create_app(service, manage_service=False))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
            ready = await api.get("/readyz")
            assert ready.status_code == 503
            assert "kafka_producer" in ready.json()["problems"]
            posted = await api.post("/v1/jobs", json={"type": "send", "payload": {"id": "a"}})
            assert posted.status_code == 201

            async def retried() -> bool:
                job = (await api.get(f"/v1/jobs/{posted.json()['id']}")).json()
                return bool(job["attempts"]) and job["state"] == "scheduled"

            await eventually(retried, timeout=60)
            job = (await api.get(f"/v1/jobs/{posted.json()['id']}")).json()
            assert job["attempts"][0]["outcome"] == "retried"
            assert (await api.get("/healthz")).status_code == 200
    finally:
        await service.stop()
