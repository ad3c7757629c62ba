"""A signed callback or heartbeat is bound to its job: the correlation key and ``?type=``
travel in the URL, which Standard Webhooks does not sign, so the key must be in the
signed body, and a ``webhook-id`` is taken once per job type whatever the URL says."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import select

from hipq.ingest.response_intake import signed_key_problem
from hipq.job_types import JobTypeError, JobTypes
from hipq.plugins import RetryStrategies
from hipq.security.signatures import signature_headers
from hipq.store.schema import responses
from hipq.templates import SIGNED_BODY_ROOTS, compile_template
from tests.security.conftest import SECRET, World
from tests.support import make_settings


def signed(body: dict[str, Any], msg_id: str) -> tuple[bytes, dict[str, str]]:
    raw = orjson.dumps(body)
    headers = signature_headers(SECRET, msg_id, int(time.time()), raw)
    return raw, {"content-type": "application/json", **headers}


async def _awaiting(world: World, type: str, *keys: str) -> list[int]:
    ids = []
    for key in keys:
        ids.append((await world.post(type, order_id=key, behavior="hold"))["id"])
    for job_id in ids:
        await world.reaches(job_id, "awaiting")
    return ids


def _refused(answer: httpx.Response, field: str) -> None:
    assert answer.status_code == 401, answer.text
    assert answer.json()["field"] == field, answer.text


async def test_a_signed_callback_replayed_for_another_key_settles_nothing(world: World) -> None:
    job_a, job_b = await _awaiting(world, "charge_signed", "A-r1", "B-r1")
    raw, headers = signed({"status": "ok", "correlation_key": "A-r1"}, "msg-a")
    first = await world.api.post(
        "/v1/callbacks/A-r1?type=charge_signed", content=raw, headers=headers
    )
    assert first.status_code == 202, first.text
    moved = await world.api.post(
        "/v1/callbacks/B-r1?type=charge_signed", content=raw, headers=headers
    )
    _refused(moved, "key")
    await world.reaches(job_a, "completed")
    for _ in range(3):
        await world.service.loops["default"].run_once()
    assert await world.state(job_b) == "awaiting"
    kept = (await world.api.get("/v1/responses", params={"key": "B-r1"})).json()["responses"]
    assert kept == []


async def test_a_signed_body_without_the_key_is_refused(world: World) -> None:
    (job,) = await _awaiting(world, "charge_signed", "C-r1")
    raw, headers = signed({"status": "ok"}, "msg-c")
    answer = await world.api.post(
        "/v1/callbacks/C-r1?type=charge_signed", content=raw, headers=headers
    )
    _refused(answer, "key")
    assert "correlation_key" in answer.json()["message"]
    raw, headers = signed({"status": "ok", "correlation_key": "C-r1"}, "msg-c2")
    answer = await world.api.post(
        "/v1/callbacks/C-r1?type=charge_signed", content=raw, headers=headers
    )
    assert answer.status_code == 202, answer.text
    await world.reaches(job, "completed")


async def test_a_webhook_id_is_taken_once_per_type_whatever_the_key(world: World) -> None:
    raw, headers = signed({"status": "ok", "correlation_key": "D-1"}, "msg-d")
    first = await world.api.post(
        "/v1/callbacks/D-1?type=charge_signed", content=raw, headers=headers
    )
    assert first.status_code == 202, first.text
    # The same message id, signed by the sender for another key: a replay of the id.
    raw, headers = signed({"status": "ok", "correlation_key": "D-2"}, "msg-d")
    again = await world.api.post(
        "/v1/callbacks/D-2?type=charge_signed", content=raw, headers=headers
    )
    assert again.status_code == 200, again.text
    assert again.json() == {"status": "duplicate", "response_id": first.json()["response_id"]}
    assert (await world.api.get("/v1/responses", params={"key": "D-2"})).json()["responses"] == []


async def test_stored_responses_show_no_signature_headers(world: World) -> None:
    raw, headers = signed({"status": "ok", "correlation_key": "E-1"}, "msg-e")
    # Other senders' credentials and signatures, by the names they use.
    secrets = ("api-key", "x-auth-token", "stripe-signature", "x-hub-signature-256")
    extra = {name: "s3cr3t-value" for name in secrets} | {"x-request-id": "r-1"}
    stored = await world.api.post(
        "/v1/callbacks/E-1?type=charge_signed", content=raw, headers={**headers, **extra}
    )
    assert stored.status_code == 202, stored.text
    shown = (await world.api.get(f"/v1/responses/{stored.json()['response_id']}")).json()
    assert not {"webhook-id", "webhook-timestamp", "webhook-signature"} & set(shown["headers"])
    assert not set(secrets) & set(shown["headers"])
    assert shown["headers"]["x-request-id"] == "r-1"
    async with world.service.store.engine.connect() as conn:
        rows = (await conn.execute(select(responses))).all()
    assert rows and "s3cr3t-value" not in str(rows)  # nor stored
    listed = (await world.api.get("/v1/responses", params={"key": "E-1"})).json()["responses"]
    assert not any(h.startswith("webhook-") for r in listed for h in r["headers"])


async def test_signed_heartbeats_are_bound_to_their_job_and_taken_once(world: World) -> None:
    job_a, job_b = await _awaiting(world, "charge_beats", "HA-1", "HB-1")
    raw, headers = signed({"correlation_key": "HA-1", "progress": 1}, "beat-1")
    first = await world.api.post(
        "/v1/callbacks/HA-1/heartbeat?type=charge_beats", content=raw, headers=headers
    )
    assert first.status_code == 202, first.text
    moved = await world.api.post(
        "/v1/callbacks/HB-1/heartbeat?type=charge_beats", content=raw, headers=headers
    )
    _refused(moved, "key")
    replayed = await world.api.post(
        "/v1/callbacks/HA-1/heartbeat?type=charge_beats", content=raw, headers=headers
    )
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["status"] == "duplicate"
    keyless, headers = signed({"progress": 2}, "beat-2")
    _refused(
        await world.api.post(
            "/v1/callbacks/HA-1/heartbeat?type=charge_beats", content=keyless, headers=headers
        ),
        "key",
    )
    assert (await world.api.get(f"/v1/jobs/{job_b}")).json()["heartbeat"] is None
    assert (await world.api.get(f"/v1/jobs/{job_a}")).json()["heartbeat"]["progress"] == 1


async def test_a_signed_message_is_taken_by_one_route_only(world: World) -> None:
    """A heartbeat replayed byte for byte as the callback settles nothing; a callback
    replayed as a heartbeat changes nothing."""
    beating, settled = await _awaiting(world, "charge_beats", "HC-1", "HD-1")
    raw, headers = signed({"correlation_key": "HC-1", "status": "ok"}, "beat-c")
    beat = await world.api.post(
        "/v1/callbacks/HC-1/heartbeat?type=charge_beats", content=raw, headers=headers
    )
    assert beat.status_code == 202, beat.text
    as_callback = await world.api.post(
        "/v1/callbacks/HC-1?type=charge_beats", content=raw, headers=headers
    )
    _refused(as_callback, "webhook-id")
    assert "delivered as a heartbeat" in as_callback.json()["message"]
    raw, headers = signed({"correlation_key": "HD-1", "status": "ok"}, "done-d")
    done = await world.api.post(
        "/v1/callbacks/HD-1?type=charge_beats", content=raw, headers=headers
    )
    assert done.status_code == 202, done.text
    as_beat = await world.api.post(
        "/v1/callbacks/HD-1/heartbeat?type=charge_beats", content=raw, headers=headers
    )
    _refused(as_beat, "webhook-id")
    await world.reaches(settled, "completed")
    for _ in range(3):
        await world.service.loops["default"].run_once()
    assert await world.state(beating) == "awaiting"
    assert (await world.api.get("/v1/responses", params={"key": "HC-1"})).json()["responses"] == []


def test_a_job_type_names_where_its_signed_body_carries_the_key() -> None:
    template = compile_template("{body.order.id}:{body.request}", SIGNED_BODY_ROOTS)
    body = {"order": {"id": "A-17"}, "request": 2}
    assert signed_key_problem(template, body, "A-17:2") is None
    assert "another correlation key" in (signed_key_problem(template, body, "B-1:2") or "")
    assert "carries no correlation key" in (signed_key_problem(template, {"order": {}}, "x") or "")
    assert "not a JSON object" in (signed_key_problem(template, "A-17:2", "A-17:2") or "")


def test_a_bad_key_template_stops_the_start() -> None:
    signed = {
        "transport": {"http": {"url": "http://127.0.0.1:9/x"}},
        "callback_signature": {"secret": SECRET, "key": "{payload.order_id}"},
    }
    settings = make_settings("sqlite+aiosqlite://", job_types={"signed": signed})
    with pytest.raises(JobTypeError) as refused:
        JobTypes.compile(settings, RetryStrategies())
    assert refused.value.field == "job_types.signed.callback_signature.key"
