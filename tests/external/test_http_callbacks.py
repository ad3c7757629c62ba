"""HTTP jobs against a real external service on loopback that answers on the callback
URL: early, twice, never, late, for unknown keys, signed, across a restart."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hipq.app import create_app
from hipq.security.signatures import signature_headers
from hipq.service import Service
from tests.peers import CallbackService, free_port, serve_app
from tests.support import eventually, make_settings

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def settings_for(database_url: str, external: str, port: int, **overrides: Any) -> Any:
    charge = {
        "correlation_key": "{payload.order_id}",
        # Long enough that a loaded machine does not time out ordinary callbacks;
        # `never_once` jobs wait it out once.
        "timeout": "4s",
        "retry": {"strategy": "fixed", "delay": "100ms", "max_attempts": 3},
        "outcome": {"field": "status", "success": ["ok"]},
        "transport": {"http": {"url": f"{external}/charges", "timeout": "5s"}},
    }
    job_types = {
        "charge": charge,
        "charge_once": {**charge, "timeout": "1s", "retry": {"strategy": "none"}},
        "charge_signed": {**charge, "callback_signature": {"secret": SECRET}},
        "charge_twice": {**charge, "retry": {**charge["retry"], "max_attempts": 2}},
        "charge_late_ok": {
            **charge,
            "timeout": "1s",
            "retry": {"strategy": "none"},
            "late_responses": "accept",
        },
    }
    return make_settings(
        database_url,
        job_types=job_types,
        server={"host": "127.0.0.1", "port": port},
        queues={"default": {"batch_interval": "100ms"}},
        **overrides,
    )


@dataclass
class World:
    api: httpx.AsyncClient
    service: Service
    external: CallbackService

    async def post(self, type: str = "charge", **payload: Any) -> dict[str, Any]:
        response = await self.api.post("/v1/jobs", json={"type": type, "payload": payload})
        assert response.status_code == 201, response.text
        return response.json()

    async def job(self, job_id: int) -> dict[str, Any]:
        return (await self.api.get(f"/v1/jobs/{job_id}")).json()

    async def state(self, job_id: int) -> str:
        return (await self.job(job_id))["state"]


@contextlib.asynccontextmanager
async def running_hipq(settings: Any) -> AsyncIterator[tuple[Service, httpx.AsyncClient]]:
    service = Service(settings)
    await service.start()
    try:
        async with serve_app(
            create_app(service, manage_service=False), settings.server.port
        ) as base:
            async with httpx.AsyncClient(base_url=base, timeout=30) as api:
                yield service, api
    finally:
        await service.stop()


@pytest.fixture
async def world(database_url: str) -> AsyncIterator[World]:
    external = CallbackService(seed=3)
    async with serve_app(external.app) as ext:
        settings = settings_for(database_url, ext, free_port())
        async with running_hipq(settings) as (service, api):
            yield World(api, service, external)
    await external.close()


async def test_mixed_traffic_every_job_completes_exactly_once(world: World) -> None:
    rng = random.Random(11)
    behaviors = [rng.choice(["normal", "early", "twice", "never_once"]) for _ in range(60)]
    jobs = []
    for i, behavior in enumerate(behaviors):
        jobs.append((behavior, await world.post(order_id=f"mix-{i}", behavior=behavior)))

    async def all_done() -> bool:
        states = [await world.state(j["id"]) for _, j in jobs]
        return all(s == "completed" for s in states)

    await eventually(all_done, timeout=60, interval=0.2)
    for behavior, posted in jobs:
        job = await world.job(posted["id"])
        assert job["result"] == {"status": "ok", "order_id": posted["payload"]["order_id"]}
        outcomes = [a["outcome"] for a in job["attempts"]]
        if behavior == "never_once":
            assert outcomes == ["retried", "completed"], job["attempts"]
            assert job["attempts"][0]["error"] == "timed out after 4s"
        else:
            assert outcomes == ["completed"], (behavior, job["attempts"])
    await world.service.upkeep.run_once()
    twice = sum(1 for b, _ in jobs if b == "twice")
    await eventually(lambda: world.external.callbacks.total() >= len(jobs) + twice, timeout=60)
    await world.service.upkeep.run_once()
    listed = (await world.api.get("/v1/responses", params={"status": "duplicate"})).json()
    assert len(listed["responses"]) == twice


async def test_an_early_response_completes_the_job_when_it_gets_there(world: World) -> None:
    posted = await world.post(order_id="early-1", behavior="early")
    await eventually(lambda: _is(world, posted["id"], "completed"), timeout=60)
    responses = (await world.api.get("/v1/responses", params={"key": "early-1"})).json()
    assert [r["status"] for r in responses["responses"]] == ["matched"]
    assert responses["responses"][0]["job_id"] == posted["id"]


async def test_a_duplicate_is_accepted_and_changes_nothing(world: World) -> None:
    posted = await world.post(order_id="dup-1", behavior="twice")
    await eventually(lambda: world.external.callbacks["dup-1"] == 2, timeout=60)
    await eventually(lambda: _is(world, posted["id"], "completed"), timeout=60)
    await world.service.upkeep.run_once()
    job = await world.job(posted["id"])
    assert [a["outcome"] for a in job["attempts"]] == ["completed"]
    statuses = sorted(
        r["status"]
        for r in (await world.api.get("/v1/responses", params={"key": "dup-1"})).json()["responses"]
    )
    assert statuses == ["duplicate", "matched"]


async def test_a_late_response_changes_nothing_and_is_counted(world: World) -> None:
    posted = await world.post("charge_once", order_id="late-1", behavior="hold")
    await eventually(lambda: _is(world, posted["id"], "failed"), timeout=60)
    response = await world.external.release("late-1")
    assert response.status_code == 202
    counts = await world.service.upkeep.run_once()
    assert counts["late"] == 1
    job = await world.job(posted["id"])
    assert (job["state"], job["last_error"]) == ("failed", "no retries: timed out after 1s")
    late = (await world.api.get("/v1/responses", params={"status": "late"})).json()["responses"]
    assert [(r["correlation_key"], r["job_id"]) for r in late] == [("late-1", posted["id"])]


async def test_a_job_type_may_accept_a_late_success(world: World) -> None:
    posted = await world.post("charge_late_ok", order_id="late-2", behavior="hold")
    await eventually(lambda: _is(world, posted["id"], "failed"), timeout=60)
    assert (await world.external.release("late-2")).status_code == 202
    assert (await world.service.upkeep.run_once())["late"] == 1
    world.service.wake_all()
    await eventually(lambda: _is(world, posted["id"], "completed"), timeout=60)
    job = await world.job(posted["id"])
    assert job["result"] == {"status": "ok", "order_id": "late-2"}
    assert [(a["outcome"], a["error"]) for a in job["attempts"]] == [
        ("failed", "no retries: timed out after 1s"),
        ("completed", "late response accepted"),
    ]


async def test_an_unknown_key_is_kept_and_an_operator_can_match_it(world: World) -> None:
    callback = await world.api.post("/v1/callbacks/nobody-knows", json={"status": "ok", "x": 1})
    assert callback.status_code == 202
    unmatched = (await world.api.get("/v1/responses", params={"matched": "false"})).json()
    [response] = unmatched["responses"]
    assert (response["correlation_key"], response["status"]) == ("nobody-knows", "pending")
    posted = await world.post(order_id="waiting-1", behavior="hold")
    await eventually(lambda: _is(world, posted["id"], "awaiting"), timeout=60)
    matched = await world.api.post(
        f"/v1/responses/{response['id']}/match", json={"job_id": posted["id"]}
    )
    assert matched.status_code == 200, matched.text
    await eventually(lambda: _is(world, posted["id"], "completed"), timeout=60)
    assert (await world.job(posted["id"]))["result"] == {"status": "ok", "x": 1}
    refused = await world.api.post(f"/v1/responses/{response['id']}/match", json={"job_id": 999})
    assert refused.status_code in (404, 409)


async def test_callbacks_the_database_cannot_store_are_422_and_others_still_land(
    world: World,
) -> None:
    bad = [
        ("/v1/callbacks/" + "k" * 501, b'{"status": "ok"}', "key"),
        ("/v1/callbacks/nul%00key", b'{"status": "ok"}', "key"),
        ("/v1/callbacks/fine-key", b'{"status": "ok", "note": "a\\u0000b"}', "body.note"),
    ]
    good = [(f"/v1/callbacks/good-{n}", b'{"status": "ok"}', None) for n in range(5)]
    # Sent together, so that good and bad callbacks reach the same write.
    answers = await asyncio.gather(
        *(world.api.post(url, content=body) for url, body, _ in [*bad, *good])
    )
    for (_url, _body, field), answer in zip([*bad, *good], answers, strict=True):
        if field is None:
            assert answer.status_code == 202, answer.text
        else:
            assert answer.status_code == 422, answer.text
            assert answer.json()["errors"][0]["field"] == field
    stored = (await world.api.get("/v1/responses", params={"limit": 100})).json()["responses"]
    assert sorted(r["correlation_key"] for r in stored) == [f"good-{n}" for n in range(5)]


async def test_a_declined_callback_is_a_failed_attempt_through_the_strategy(world: World) -> None:
    posted = await world.post(order_id="no-1", behavior="declined")
    await eventually(lambda: _is(world, posted["id"], "failed"), timeout=60)
    job = await world.job(posted["id"])
    assert [a["outcome"] for a in job["attempts"]] == ["retried", "retried", "failed"]
    assert job["attempts"][0]["error"] == "status='declined' is not one of ok"
    assert job["attempts"][0]["response"] == {"status": "declined", "order_id": "no-1"}


async def test_signature_failures_are_401_before_anything_is_stored(world: World) -> None:
    body = b'{"status": "ok", "correlation_key": "sig-1"}'
    unsigned = await world.api.post("/v1/callbacks/sig-1?type=charge_signed", content=body)
    assert unsigned.status_code == 401
    assert unsigned.json()["field"] == "webhook-signature"
    now = int(time.time())
    stale = signature_headers(SECRET, "msg-1", now - 3600, body)
    assert (
        await world.api.post("/v1/callbacks/sig-1?type=charge_signed", content=body, headers=stale)
    ).status_code == 401
    forged = signature_headers("whsec_" + "A" * 32, "msg-1", now, body)
    assert (
        await world.api.post("/v1/callbacks/sig-1?type=charge_signed", content=body, headers=forged)
    ).status_code == 401
    assert (await world.api.get("/v1/responses")).json()["responses"] == []
    good = signature_headers(SECRET, "msg-1", now, body)
    accepted = await world.api.post(
        "/v1/callbacks/sig-1?type=charge_signed", content=body, headers=good
    )
    assert accepted.status_code == 202
    assert (await world.api.post("/v1/callbacks/x?type=nope", content=body)).status_code == 422


async def test_an_unsigned_callback_cannot_settle_a_job_that_requires_signatures(
    world: World,
) -> None:
    posted = await world.post("charge_signed", order_id="sig-2", behavior="hold")
    await eventually(lambda: _is(world, posted["id"], "awaiting"), timeout=60)
    body = b'{"status": "ok"}'
    for query in ("", "?type=charge"):  # no type, or an unsigned job type's name
        sneaky = await world.api.post(f"/v1/callbacks/sig-2{query}", content=body)
        assert sneaky.status_code == 202  # stored, but it must not match
    world.service.wake_all()
    await world.service.loops["default"].run_once()
    assert await world.state(posted["id"]) == "awaiting"
    body = b'{"status": "ok", "correlation_key": "sig-2"}'  # signed, the key is in it
    signed = signature_headers(SECRET, "msg-2", int(time.time()), body)
    accepted = await world.api.post(
        "/v1/callbacks/sig-2?type=charge_signed", content=body, headers=signed
    )
    assert accepted.status_code == 202
    await eventually(lambda: _is(world, posted["id"], "completed"), timeout=60)


async def test_a_restart_between_dispatch_and_response_loses_nothing(database_url: str) -> None:
    external = CallbackService()
    port = free_port()
    async with serve_app(external.app) as ext:
        settings = settings_for(database_url, ext, port, lease_ttl="1s")
        settings.job_types["charge"].timeout = 60.0
        async with running_hipq(settings) as (_service, api):
            posted = (
                await api.post(
                    "/v1/jobs",
                    json={"type": "charge", "payload": {"order_id": "r-1", "behavior": "hold"}},
                )
            ).json()
            await eventually(lambda: "r-1" in external.held, timeout=60)
            await eventually(lambda: _state(api, posted["id"], "awaiting"), timeout=60)
        # hipq is down; it comes back on the same database and address.
        async with running_hipq(settings) as (_service, api):
            assert (await api.get(f"/v1/jobs/{posted['id']}")).json()["state"] == "awaiting"
            assert (await external.release("r-1")).status_code == 202
            await eventually(lambda: _state(api, posted["id"], "completed"), timeout=60)
            assert external.requests["r-1"] == 1  # an awaiting job is not sent again
    await external.close()


async def _is(world: World, job_id: int, state: str) -> bool:
    return await world.state(job_id) == state


async def _state(api: httpx.AsyncClient, job_id: int, state: str) -> bool:
    return (await api.get(f"/v1/jobs/{job_id}")).json()["state"] == state


async def test_metrics_count_sends_responses_and_the_wait_for_them(world: World) -> None:
    """What an operator graphs: requests sent, responses stored by source and what
    each turned out to be, and how long jobs waited for their responses."""
    twice = await world.post(order_id="m-dup", behavior="twice")
    late = await world.post("charge_once", order_id="m-late", behavior="hold")
    unknown = await world.api.post("/v1/callbacks/m-nobody", json={"status": "ok"})
    assert unknown.status_code == 202
    await eventually(lambda: world.external.callbacks["m-dup"] == 2, timeout=60)
    await eventually(lambda: _is(world, twice["id"], "completed"), timeout=60)
    await eventually(lambda: _is(world, late["id"], "failed"), timeout=60)
    assert (await world.external.release("m-late")).status_code == 202
    await world.service.upkeep.run_once()

    scraped = await world.api.get("/metrics")
    assert scraped.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scraped.text)
        for s in family.samples
    }
    assert samples[("hipq_jobs_sent_total", (("queue", "default"),))] == 2
    assert samples[("hipq_responses_stored_total", (("source", "webhook"),))] == 4
    settled = {
        status: samples.get(("hipq_responses_settled_total", (("status", status),)))
        for status in ("matched", "duplicate", "late")
    }
    assert settled == {"matched": 1, "duplicate": 1, "late": 1}
    assert samples[("hipq_response_wait_seconds_count", (("queue", "default"),))] == 1
    waited = samples[("hipq_response_wait_seconds_sum", (("queue", "default"),))]
    assert 0 < waited < 10


async def test_keys_with_reserved_characters_come_back_through_the_callback_url(
    world: World,
) -> None:
    """The key is percent-encoded in the callback URL; a slash in it must not make the
    callback miss the route (it did: a 404, and the job timed out)."""
    odd = ["A/17", "B 2?x#y", "C%2F3+d", "D/../e", "ü/ñ"]
    jobs = [await world.post(order_id=key, behavior="normal") for key in odd]
    for job in jobs:
        await eventually(lambda job=job: _is(world, job["id"], "completed"), timeout=60)
    matched = (await world.api.get("/v1/responses", params={"status": "matched"})).json()
    assert sorted(r["correlation_key"] for r in matched["responses"]) == sorted(odd)
