"""/v1/queues (config, live counts, pause/resume) and the operator's endpoints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from hipq.app import create_app
from hipq.service import Service
from tests.api.conftest import Api, api_settings, open_api
from tests.support import FakeClock, eventually

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


async def queue(api: Api, name: str) -> dict[str, Any]:
    response = await api.client.get(f"/v1/queues/{name}")
    assert response.status_code == 200, response.text
    return response.json()


def counts(q: dict[str, Any]) -> dict[str, int]:
    names = ("scheduled", "due", "running", "awaiting", "failed", "capacity_in_use")
    return {n: q[n] for n in names}


async def test_queue_config_and_live_counts(api: Api) -> None:
    loop = api.loop("default")
    sent = await api.post_job(type="hang", weight=2)
    await api.post_job(type="hang", weight=3)
    await api.post_job(type="permanent")
    await api.tick()
    # The transport reports that the first job's request left: it awaits its response.
    loop.sent(loop.in_flight[sent["id"]])
    await api.tick(ticks=1)
    for _ in range(2):
        await api.post_job(type="ok")
    await api.post_job(type="ok", run_at=(NOW + timedelta(hours=1)).isoformat())

    default = await queue(api, "default")
    assert counts(default) == {
        "scheduled": 3,
        "due": 2,
        "running": 1,
        "awaiting": 1,
        "failed": 1,
        "capacity_in_use": 5,
    }
    assert default["concurrency"] == 10
    assert default["order"] == "time_priority"
    assert default["batch_interval"] == 1.0
    assert default["batch_size"] == 1000
    assert "concurrency" in default["throttlers"]
    assert default["paused"] is False
    assert default["owner"] == api.service.owner

    api.clock.advance(3600)
    assert (await queue(api, "default"))["due"] == 3

    listed = (await api.client.get("/v1/queues")).json()["queues"]
    assert [q["name"] for q in listed] == ["bulk", "default"]
    bulk = listed[0]
    assert bulk["concurrency"] is None
    assert bulk["order"] == "priority_time"
    assert bulk["batch_interval"] == 2.0
    assert bulk["batch_size"] == 500
    assert bulk["owner"] is None  # no loop took it
    assert counts(bulk) == dict.fromkeys(counts(bulk), 0)
    assert counts(listed[1]) == counts(await queue(api, "default"))


async def test_capacity_holds_jobs_and_says_why(api: Api) -> None:
    await api.post_job(type="hang", weight=8)
    await api.tick(ticks=1)
    held = await api.post_job(type="ok", weight=3)
    await api.tick(ticks=1)
    q = await queue(api, "default")
    assert counts(q) == {
        "scheduled": 1,
        "due": 1,
        "running": 1,
        "awaiting": 0,
        "failed": 0,
        "capacity_in_use": 8,
    }
    assert q["held_by"].get("concurrency") == 1
    job = await api.job(held["id"])
    assert job["state"] == "scheduled"
    assert job["waiting_reason"]


async def test_unknown_queue_is_404(sqlite_api: Api) -> None:
    for method, path in (
        ("GET", "/v1/queues/nope"),
        ("POST", "/v1/queues/nope/pause"),
        ("POST", "/v1/queues/nope/resume"),
    ):
        response = await sqlite_api.client.request(method, path)
        assert response.status_code == 404, response.text
        body = response.json()
        assert body["error"] == "not_found"
        assert body["field"] == "name"
        assert "nope" in body["message"]


async def test_pause_and_resume(api: Api) -> None:
    response = await api.client.post("/v1/queues/default/pause")
    assert response.status_code == 200, response.text
    assert response.json()["paused"] is True
    job = await api.post_job(type="ok")
    await api.tick()
    q = await queue(api, "default")
    assert q["paused"] is True
    assert q["due"] == 1
    assert (await api.job(job["id"]))["state"] == "scheduled"
    # The other queue is not affected.
    assert (await queue(api, "bulk"))["paused"] is False

    response = await api.client.post("/v1/queues/default/resume")
    assert response.status_code == 200, response.text
    assert response.json()["paused"] is False
    await api.tick()
    assert (await api.job(job["id"]))["state"] == "completed"
    assert (await queue(api, "default"))["due"] == 0


async def test_paused_queue_lets_running_jobs_finish(api: Api) -> None:
    running = await api.post_job(type="record")
    waiting = await api.post_job(type="ok", run_at=(NOW + timedelta(seconds=5)).isoformat())
    loop = api.loop("default")
    assert await loop.acquire()
    await loop.run_once()  # claims `running`; its handler finishes before the next tick
    await api.client.post("/v1/queues/default/pause")
    api.clock.advance(5)
    await api.tick()
    assert (await api.job(running["id"]))["state"] == "completed"
    assert (await api.job(waiting["id"]))["state"] == "scheduled"


# -- operator endpoints ------------------------------------------------------------------


async def test_healthz_and_readyz(sqlite_api: Api) -> None:
    response = await sqlite_api.client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    response = await sqlite_api.client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "ready"


async def test_readyz_before_the_service_started(sqlite_url: str) -> None:
    service = Service(api_settings(sqlite_url), clock=FakeClock(), run_loops=False)
    app = create_app(service, manage_service=False)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost"
        ) as client:
            response = await client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["status"] == "not ready"
        assert "service" in response.json()["problems"]
    finally:
        await service.store.close()


def metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


async def test_metrics_after_jobs_ran(database_url: str) -> None:
    # Real loops this time: the API's wake-up must get the jobs run without manual ticks.
    async with open_api(database_url, run_loops=True) as api:
        ids = [(await api.post_job(type="ok"))["id"] for _ in range(3)]
        ids.append((await api.post_job(type="permanent"))["id"])

        async def all_done() -> bool:
            states = [(await api.job(i))["state"] for i in ids]
            return states == ["completed"] * 3 + ["failed"]

        await eventually(all_done, timeout=60)
        response = await api.client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        text = response.text
        assert metric(text, "hipq_jobs_admitted_total", queue="default") == 4
        assert metric(text, "hipq_jobs_settled_total", queue="default", state="completed") == 3
        assert metric(text, "hipq_jobs_settled_total", queue="default", state="failed") == 1
        assert metric(text, "hipq_queue_owned", queue="default") == 1


async def test_docs_and_openapi_list_the_routes(sqlite_api: Api) -> None:
    docs = await sqlite_api.client.get("/docs")
    assert docs.status_code == 200
    assert "text/html" in docs.headers["content-type"]
    assert "swagger" in docs.text.lower()

    spec = (await sqlite_api.client.get("/openapi.json")).json()
    paths = spec["paths"]
    expected = {
        "/v1/jobs": {"get", "post"},
        "/v1/jobs/batch": {"post"},
        "/v1/jobs/{job_id}": {"get", "patch"},
        "/v1/jobs/{job_id}/cancel": {"post"},
        "/v1/jobs/{job_id}/retry": {"post"},
        "/v1/queues": {"get"},
        "/v1/queues/{name}": {"get"},
        "/v1/queues/{name}/pause": {"post"},
        "/v1/queues/{name}/resume": {"post"},
        "/healthz": {"get"},
        "/readyz": {"get"},
        "/metrics": {"get"},
    }
    for path, methods in expected.items():
        assert path in paths, path
        assert methods <= set(paths[path]), (path, set(paths[path]))
    # Documented error answers: a client can generate code from them.
    create = paths["/v1/jobs"]["post"]
    assert {"201", "409", "413", "422"} <= set(create["responses"])
    assert "Idempotency-Key" in {p["name"] for p in create.get("parameters", [])}
    job_fields = set(spec["components"]["schemas"]["JobIn"]["properties"])
    assert {
        "type",
        "payload",
        "queue",
        "run_at",
        "priority",
        "weight",
        "labels",
        "windows",
        "timeout",
        "retry",
        "correlation_key",
        "job_key",
        "job_key_mode",
        "critical",
    } <= job_fields


async def test_unknown_routes_and_methods_answer_json(sqlite_api: Api) -> None:
    response = await sqlite_api.client.get("/v1/nothing")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    response = await sqlite_api.client.delete("/v1/jobs")
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"
