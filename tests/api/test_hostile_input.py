"""Hostile input answers a 4xx naming the field, never a 500, and never changes data
silently: deep nesting, numbers past 64 bits, duplicate keys, odd cursors and keys."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from typing import Any

import httpx
import orjson
import pytest

from hipq.api.json_body import MAX_DEPTH
from tests.api.conftest import Api, open_api
from tests.api.test_jobs_api import assert_error

JSON = {"content-type": "application/json"}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


async def post_raw(api: Api, path: str, body: str | bytes) -> httpx.Response:
    return await api.client.post(path, content=body, headers=JSON)


# -- 5: deep nesting ---------------------------------------------------------------------


@pytest.mark.parametrize("depth", [300, 1000, 100_000])
async def test_deep_nesting_is_refused_naming_the_field(api: Api, depth: int) -> None:
    deep = nested(depth)
    one = await post_raw(api, "/v1/jobs", f'{{"type": "ok", "payload": {{"a": {deep}}}}}')
    assert_error(one, 422, "payload.a")
    assert str(MAX_DEPTH) in one.json()["message"]
    batch = await post_raw(
        api, "/v1/jobs/batch", f'{{"jobs": [{{"type": "ok", "payload": {{"a": {deep}}}}}]}}'
    )
    assert_error(batch, 422, "jobs[0].payload")
    callback = await post_raw(api, "/v1/callbacks/k1", f'{{"a": {deep}}}')
    assert_error(callback, 422, "body.a")
    assert await api.count_jobs() == 0
    assert (await api.client.get("/v1/responses")).json()["responses"] == []


async def test_nesting_up_to_the_limit_is_kept(api: Api) -> None:
    payload = {"a": orjson.loads(nested(MAX_DEPTH - 1))}
    job = await api.post_job(type="ok", payload=payload)
    assert (await api.job(job["id"]))["payload"] == payload


# -- 11: integers past 64 bits -----------------------------------------------------------


@pytest.mark.parametrize("number", [2**63, -(2**63) - 1, 2**70])
async def test_integers_past_64_bits_are_refused(api: Api, number: int) -> None:
    job = await api.post_job(type="ok")
    bodies = {
        "/v1/jobs": f'{{"type": "ok", "payload": {{"n": {number}}}}}',
        "/v1/jobs/batch": f'{{"jobs": [{{"type": "ok", "payload": {{"n": [{number}]}}}}]}}',
        "/v1/callbacks/k2": f'{{"n": {number}}}',
    }
    fields = {"/v1/jobs": "payload.n", "/v1/jobs/batch": "jobs[0].payload.n[0]"}
    for path, body in bodies.items():
        assert_error(await post_raw(api, path, body), 422, fields.get(path, "body.n"))
    patch = await api.client.patch(
        f"/v1/jobs/{job['id']}", content=f'{{"payload": {{"n": {number}}}}}', headers=JSON
    )
    assert_error(patch, 422, "payload.n")
    assert await api.count_jobs() == 1
    assert (await api.job(job["id"]))["payload"] == {}


async def test_the_64_bit_extremes_are_kept_exactly(api: Api) -> None:
    payload = {"max": 2**63 - 1, "min": -(2**63), "big": 1.5e300}
    job = await api.post_job(type="ok", payload=payload)
    assert (await api.job(job["id"]))["payload"] == payload


# -- 12: duplicate keys ------------------------------------------------------------------


async def test_duplicate_keys_are_refused_naming_the_key(api: Api) -> None:
    job = await api.post_job(type="ok")
    cases: list[tuple[str, str, str, str]] = [
        ("post", "/v1/jobs", '{"type": "ok", "type": "fail"}', "type"),
        ("post", "/v1/jobs", '{"type": "ok", "payload": {"a": 1, "a": 2}}', "payload.a"),
        ("post", "/v1/jobs/batch", '{"jobs": [{"type": "ok"}, {"type": "ok", "type": "ok"}]}',
         "jobs[1].type"),
        ("patch", f"/v1/jobs/{job['id']}", '{"priority": 1, "priority": 2}', "priority"),
        ("post", "/v1/callbacks/k3", '{"ok": true, "ok": false}', "body.ok"),
        ("post", "/v1/responses/1/match", '{"job_id": 1, "job_id": 2}', "job_id"),
    ]  # fmt: skip
    for method, path, body, field in cases:
        response = await api.client.request(method, path, content=body, headers=JSON)
        assert "duplicate key" in assert_error(response, 422, field)["message"], path
    assert await api.count_jobs() == 1
    assert (await api.job(job["id"]))["priority"] == 100  # the default, unchanged
    assert (await api.client.get("/v1/responses")).json()["responses"] == []


async def test_nan_and_invalid_json_are_still_refused(sqlite_api: Api) -> None:
    for body in ('{"type": "ok", "payload": {"x": NaN}}', '{"type": "ok",', b'{"type": "\xff"}'):
        assert_error(await post_raw(sqlite_api, "/v1/jobs", body), 422, None)


async def test_a_callback_body_that_is_not_json_is_kept_as_text(api: Api) -> None:
    response = await post_raw(api, "/v1/callbacks/k4", "done, NaN")
    assert response.status_code == 202, response.text
    stored = (await api.client.get(f"/v1/responses/{response.json()['response_id']}")).json()
    assert stored["body"] == "done, NaN"


# -- 6, 8, 9: list parameters ------------------------------------------------------------


@pytest.mark.parametrize("cursor", ["٣", "9" * 4301, "9223372036854775808", "²", "0" * 30 + "1"])
async def test_every_list_refuses_a_cursor_it_did_not_return(sqlite_api: Api, cursor: str) -> None:
    for path in ("/v1/jobs", "/v1/responses", "/v1/responses/parked"):
        response = await sqlite_api.client.get(path, params={"cursor": cursor})
        assert_error(response, 422, "cursor")


async def test_label_filters_are_bounded(api: Api) -> None:
    await api.post_job(type="ok", labels={"a": "1"})
    twenty = [("label", "a:1")] * 20
    assert len((await api.client.get("/v1/jobs", params=twenty)).json()["jobs"]) == 1
    for count in (21, 1000):
        response = await api.client.get("/v1/jobs", params=[("label", "a:1")] * count)
        assert "at most 20" in assert_error(response, 422, "label")["message"]


async def test_string_filters_refuse_nul(api: Api) -> None:
    assert_error(await api.client.get("/v1/responses", params={"key": "a\x00"}), 422, "key")
    for name in ("queue", "type", "label"):
        assert_error(await api.client.get("/v1/jobs", params={name: "a:\x00"}), 422, name)


# -- 7: signatures --------------------------------------------------------------------


async def test_a_signed_callback_with_an_absurd_timestamp_is_unauthorized(
    sqlite_url: str,
) -> None:
    signed = {
        "transport": {"python": {"handler": "tests.handlers:ok"}},
        "callback_signature": {"secret": "s3cret"},
    }
    async with open_api(sqlite_url, job_types={"signed": signed}) as api:
        body = b'{"ok": true}'
        for digits in (309, 400, 5000):
            ts = "9" * digits  # signed correctly, so only the timestamp is at fault
            mac = hmac.new(b"s3cret", f"m1.{ts}.".encode() + body, hashlib.sha256).digest()
            signature = "v1," + base64.b64encode(mac).decode()
            headers = {"webhook-id": "m1", "webhook-timestamp": ts, "webhook-signature": signature}
            headers.update(JSON)
            response = await api.client.post(
                "/v1/callbacks/k5?type=signed", content=body, headers=headers
            )
            assert_error(response, 401, "webhook-signature")
        assert (await api.client.get("/v1/responses")).json()["responses"] == []


# -- 13: keys the callback route cannot carry --------------------------------------------


@pytest.mark.parametrize("key", ["a\nb", "tab\there", "bell\x07", "del\x7f"])
async def test_a_correlation_key_the_callback_url_cannot_carry_is_refused(
    api: Api, key: str
) -> None:
    response = await api.client.post("/v1/jobs", json={"type": "ok", "correlation_key": key})
    assert_error(response, 422, "correlation_key")
    typed = {"type": "typed", "payload": {"order_id": key}}  # its key: order-{payload.order_id}
    rendered = await api.client.post("/v1/jobs", json=typed)
    assert_error(rendered, 422, "correlation_key")
    assert await api.count_jobs() == 0


async def test_an_empty_callback_key_is_not_stored(api: Api) -> None:
    response = await post_raw(api, "/v1/callbacks/", '{"ok": true}')
    assert 400 <= response.status_code < 500
    assert_error(response, response.status_code)
    assert (await api.client.get("/v1/responses")).json()["responses"] == []


async def test_a_key_with_unusual_but_printable_characters_completes_by_callback(
    api: Api,
) -> None:
    key = "order ü/?#%"
    job = await api.post_job(type="ok", correlation_key=key)
    assert job["correlation_key"] == key


# -- 14: big bodies and big pages --------------------------------------------------------


async def test_health_answers_while_a_big_body_is_parsed(sqlite_api: Api) -> None:
    # Refused only once all of it is parsed and validated, and without touching the
    # database: parsed on the event loop, nothing else could run until its answer.
    items = ",".join(str(10**12 + i) for i in range(300_000))  # about 4 MB
    big = f'{{"type": "ok", "payload": {{"items": [{items}]}}, "priority": "high"}}'
    finished: list[str] = []

    async def post_big() -> None:
        response = await post_raw(sqlite_api, "/v1/jobs", big)
        assert_error(response, 422, "priority")
        finished.append("big")

    async def health() -> None:
        await asyncio.sleep(0)  # once the big request has started
        response = await sqlite_api.client.get("/healthz")
        assert response.status_code == 200
        finished.append("health")

    await asyncio.gather(post_big(), health())
    assert finished == ["health", "big"]


async def test_a_big_body_is_validated_like_a_small_one(sqlite_api: Api) -> None:
    pad = "x" * 300_000
    response = await sqlite_api.client.post(
        "/v1/jobs", json={"type": "ok", "priority": "high", "payload": {"pad": pad}}
    )
    assert_error(response, 422, "priority")
    response = await sqlite_api.client.post(
        "/v1/jobs", json={"type": "ok", "payload": {"pad": pad, "bad": "\x00"}}
    )
    assert_error(response, 422, "payload.bad")
    assert await sqlite_api.count_jobs() == 0


async def test_a_page_of_jobs_is_bounded_in_bytes(sqlite_api: Api) -> None:
    pad = "x" * (1024 * 1024)
    ids = [(await sqlite_api.post_job(type="ok", payload={"pad": pad}))["id"] for _ in range(7)]
    seen: list[int] = []
    cursor: dict[str, Any] = {}
    while True:
        page = (await sqlite_api.client.get("/v1/jobs", params=cursor)).json()
        assert len(page["jobs"]) <= 5  # 4 MiB, and the job that passes it
        seen += [j["id"] for j in page["jobs"]]
        if page["next_cursor"] is None:
            break
        cursor = {"cursor": page["next_cursor"]}
    assert seen == ids[::-1]
