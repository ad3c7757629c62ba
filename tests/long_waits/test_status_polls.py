"""Callback-or-poll against a loopback peer that loses some callbacks: hipq asks for
the status of overdue jobs and settles them from the answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from hipq.config import load_settings
from hipq.process.status_polls import StatusPolls
from hipq.service import Service, ServiceError
from tests.external.test_http_callbacks import running_hipq
from tests.long_waits.lossy_peer import LossyService
from tests.peers import free_port, serve_app
from tests.support import eventually, make_settings


def settings_for(database_url: str, peer: str) -> Any:
    charge = {
        "correlation_key": "{payload.order_id}",
        # Delivered callbacks settle their jobs long before a status request is due
        # (at 5 % of the timeout: 4 s); lost ones are asked about then, and again
        # every 300 ms while the peer says it is still working. The long timeout
        # leaves a loaded machine over a minute to settle a job by its status answer
        # before the timeout would.
        "timeout": "80s",
        "retry": {"strategy": "fixed", "delay": "100ms", "max_attempts": 2},
        "outcome": {"field": "status", "success": ["ok"]},
        "transport": {"http": {"url": f"{peer}/charges", "timeout": "5s"}},
        "status_request": {
            "url": f"{peer}/status/{{payload.order_id}}",
            "after": 0.05,
            "every": "300ms",
            "working": ["working"],
        },
    }
    once = {**charge, "retry": {"strategy": "none"}}
    return make_settings(
        database_url,
        job_types={"charge": charge, "charge_once": once},
        server={"host": "127.0.0.1", "port": free_port()},
        queues={"default": {"batch_interval": "100ms"}},
    )


@dataclass
class World:
    api: httpx.AsyncClient
    service: Service
    peer: LossyService

    async def post(self, type: str = "charge", **payload: Any) -> dict[str, Any]:
        response = await self.api.post("/v1/jobs", json={"type": type, "payload": payload})
        assert response.status_code == 201, response.text
        return response.json()

    async def job(self, job_id: int) -> dict[str, Any]:
        return (await self.api.get(f"/v1/jobs/{job_id}")).json()

    async def finished(self, job_id: int) -> dict[str, Any] | None:
        seen = await self.job(job_id)
        return seen if seen["state"] in ("completed", "failed") else None


@pytest.fixture
async def world(database_url: str) -> AsyncIterator[World]:
    peer = LossyService(seed=9)
    async with serve_app(peer.app) as base:
        async with running_hipq(settings_for(database_url, base)) as (service, api):
            yield World(api, service, peer)
    await peer.close()


async def test_lost_callbacks_are_made_good_by_the_status_request(world: World) -> None:
    jobs = []
    for i in range(24):
        lose = i % 3 == 0
        working = (i // 3) % 3 if lose else 0  # 0, 1 or 2 "still working" answers first
        jobs.append(await world.post(order_id=f"o-{i}", lose=lose, working=working))
    done = [await eventually(lambda j=j: world.finished(j["id"]), timeout=120) for j in jobs]
    for i, job in enumerate(done):
        key = f"o-{i}"
        assert job["state"] == "completed", job
        assert job["result"] == {"status": "ok", "order_id": key}
        # Settled in the first attempt: none of them waited for its timeout.
        assert [a["outcome"] for a in job["attempts"]] == ["completed"], job["attempts"]
        if key in world.peer.lost:
            # Asked once per "still working" answer, then once for the final one.
            assert world.peer.polls[key] == world.peer.orders[key]["working"] + 1, key
        else:
            assert world.peer.polls[key] == 0, key  # its callback came in time
    assert len(world.peer.lost) == 8
    # The answers went through the responses inbox, marked as what they were.
    listed = (await world.api.get("/v1/responses", params={"limit": 100})).json()
    sources = [r["source"] for r in listed["responses"]]
    assert sources.count("status_request") == 8 and sources.count("webhook") == 16
    metrics = (await world.api.get("/metrics")).text
    assert 'hipq_status_polls_total{type="charge",verdict="final"} 8.0' in metrics
    assert 'hipq_status_polls_total{type="charge",verdict="working"} 7.0' in metrics


async def test_a_final_failure_settles_the_job_by_its_outcome_rule(world: World) -> None:
    job = await world.post("charge_once", order_id="d-1", lose=True, final="declined")
    done = await eventually(lambda: world.finished(job["id"]), timeout=120)
    assert done["state"] == "failed", done
    assert "declined" in done["last_error"]
    assert world.peer.polls["d-1"] == 1


async def test_a_busy_status_keeps_the_job_waiting(world: World) -> None:
    """`working_statuses` (202 by default): an HTTP status that means still working."""
    job = await world.post(order_id="b-1", lose=True, working=2, busy_status=202)
    done = await eventually(lambda: world.finished(job["id"]), timeout=120)
    assert done["state"] == "completed" and world.peer.polls["b-1"] == 3


@pytest.mark.parametrize(
    ("status_request", "message"),
    [
        (
            {"url": "http://127.0.0.1:1/s/{payload.k"},
            "config error: job_types.t.status_request.url",
        ),
        (
            {"url": "http://127.0.0.1:1/s", "working": ["w"]},
            "config error: job_types.t.status_request.working: the job type's outcome rule "
            "names no field or header to read",
        ),
    ],
)
def test_a_bad_status_request_stops_the_start_naming_the_key(
    tmp_path: Any, status_request: dict[str, Any], message: str
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/hipq.db"
    job_type = {
        "correlation_key": "{payload.k}",
        "outcome": {"field": None},
        "transport": {"http": {"url": "http://127.0.0.1:1/x"}},
        "status_request": status_request,
    }
    with pytest.raises(ServiceError) as refused:
        Service(load_settings(None, database_url=url, job_types={"t": job_type}))
    assert str(refused.value).startswith(message), refused.value
    plain = Service(load_settings(None, database_url=url))
    assert not any(a.name == StatusPolls.name for a in plain.activities)
