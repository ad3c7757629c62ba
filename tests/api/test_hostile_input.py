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
from tests.pull.test_pull_api import PULL, fetch, report
from tests.pull.test_pull_api import QUEUES as PULL_QUEUES

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


# -- identifiers and numbers: one spelling, bounded where they enter ---------------------

LIMITED = {
    "default": {
        "concurrency": 10,
        "throttlers": [{"rate": {"limit": 5, "per": "1s"}}, {"concurrency": {"limit": 8}}],
    },
    "bulk": {},
}


async def patch_limits(api: Api, body: dict[str, Any]) -> httpx.Response:
    return await api.client.patch("/v1/queues/default/limits", json=body)


async def test_a_throttler_index_has_one_spelling(database_url: str) -> None:
    async with open_api(database_url, queues=LIMITED) as api:
        assert (await patch_limits(api, {"throttlers": {"1": {"limit": 1}}})).status_code == 200
        for index in ("01", "٣", "²", "1.0", " 1", "-1", ""):
            refused = await patch_limits(api, {"throttlers": {index: {"limit": 4}}})
            assert_error(refused, 422, f"throttlers.{index}")
        changed = await patch_limits(api, {"throttlers": {"1": {"limit": 7}}})
        assert changed.status_code == 200, changed.text
        limits = changed.json()["limits"]
        assert limits["overrides"] == {"throttlers": {"1": {"limit": 7}}}
        assert limits["throttlers"][1] == {"concurrency": {"limit": 7}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"throttlers": {"0": {"per": 1e308}}}, "throttlers.0.per"),
        ({"throttlers": {"0": {"per": "99999999999d"}}}, "throttlers.0.per"),
        ({"throttlers": {"0": {"limit": 10**19}}}, "throttlers.0.limit"),
        ({"throttlers": {"1": {"limit": 2**63 - 1}}}, "throttlers.1.limit"),
        ({"concurrency": 2**63 - 1}, "concurrency"),
        ({"concurrency": 10**19}, "concurrency"),
        ({"concurrency": 0}, "concurrency"),
    ],
)
async def test_limits_out_of_range_are_refused(sqlite_url: str, body: dict, field: str) -> None:
    async with open_api(sqlite_url, queues=LIMITED) as api:
        assert_error(await patch_limits(api, body), 422, field)
        shown = (await api.client.get("/v1/queues/default")).json()
        assert shown["concurrency"] == 10 and shown["limits"]["overrides"] == {}


async def test_durations_take_ascii_digits_only(api: Api) -> None:
    for field in ("unique_for", "timeout", "run_in"):
        job = {"type": "ok", "job_key": "k", field: "٣h"}
        refused = await api.client.post("/v1/jobs", json=job)
        assert_error(refused, 422, field)
        assert "ASCII" in refused.json()["message"]
    assert await api.count_jobs() == 0
    kept = await api.post_job(type="ok", job_key="k", unique_for="3h", timeout="90s")
    assert kept["timeout"] == 90


@pytest.mark.parametrize("flag", ["a\x7fb", "a\x85b", "\x9f", "a\nb"])
async def test_flags_refuse_control_characters(sqlite_api: Api, flag: str) -> None:
    job = await sqlite_api.client.post("/v1/jobs", json={"type": "ok", "flags": ["ok", flag]})
    assert_error(job, 422, "flags")
    put = await sqlite_api.client.put("/v1/queues/default/forbidden-flags", json={"flags": [flag]})
    assert_error(put, 422, "flags")
    assert await sqlite_api.count_jobs() == 0
    assert (await sqlite_api.post_job(type="ok", flags=["naïve-ü"]))["flags"] == ["naïve-ü"]


async def test_path_ids_are_ascii_digits(api: Api) -> None:
    job = await api.post_job(type="ok")
    batch = await api.client.post("/v1/batches", json={})
    assert batch.status_code == 201, batch.text
    for ref, found in ((job["id"], "/v1/jobs"), (batch.json()["id"], "/v1/batches")):
        assert (await api.client.get(f"{found}/{ref}")).status_code == 200
        for spelled in (f"{ref}.0", f"%20{ref}", f"{ref}%20", f"+{ref}", "\u0661"):
            refused = await api.client.get(f"{found}/{spelled}")
            assert_error(refused, 422, "job_id" if found == "/v1/jobs" else "batch_id")


async def test_a_workers_report_with_a_lone_surrogate_is_refused(sqlite_url: str) -> None:
    async with open_api(sqlite_url, job_types=PULL, queues=PULL_QUEUES) as api:
        await api.post_job(type="pull_a")
        await api.tick()
        [job] = await fetch(api, ["pull_a"])
        for body, field in (
            ('{"token": "%s", "result": {"s": "\\ud800"}}', "result.s"),
            ('{"token": "%s", "result": {"\\udfff": 1}}', "result.?"),
        ):
            raw = body % job["token"]
            answer = await post_raw(api, f"/v1/workers/jobs/{job['id']}/complete", raw)
            assert_error(answer, 422, field)
        beat = await api.client.post(
            f"/v1/workers/jobs/{job['id']}/heartbeat", json={"token": job["token"], "pct": 5}
        )
        assert_error(beat, 422, "pct")
        done = await report(api, job, "complete", result={"s": "\U0001f600"})
        assert done.status_code == 202, done.text
        await api.tick()
        assert (await api.job(job["id"]))["result"] == {"s": "\U0001f600"}


async def test_a_heartbeat_refuses_an_unknown_field(sqlite_url: str) -> None:
    beating = {
        "heartbeat_timeout": "30s",
        "transport": {"http": {"url": "http://127.0.0.1:9/work"}},
    }
    async with open_api(sqlite_url, job_types={"beating": beating}) as api:
        url = "/v1/callbacks/k1/heartbeat?type=beating"
        unknown = await api.client.post(url, json={"progress": 1, "pct": 5})
        assert_error(unknown, 422, "pct")
        known = await api.client.post(url, json={"progress": 1, "checkpoint": {"n": 1}})
        assert_error(known, 404, "key")  # read, then no job in flight has the key


@pytest.mark.parametrize(
    ("job", "field"),
    [
        ({"retry": {"strategy": "fixed", "delay": 1e308}}, "retry"),
        ({"retry": {"strategy": "fixed", "delay": "99999999d"}}, "retry"),
        ({"retry": {"strategy": "exponential", "initial": 1e308}}, "retry"),
        ({"retry": {"strategy": "exponential", "max": "3651d"}}, "retry"),
        ({"windows": [{"start": "\u06605:00", "end": "07:00"}]}, "windows"),
    ],
)
async def test_retry_delays_and_window_times_are_bounded(
    sqlite_api: Api, job: dict[str, Any], field: str
) -> None:
    assert_error(await sqlite_api.client.post("/v1/jobs", json={"type": "ok", **job}), 422, field)
    assert await sqlite_api.count_jobs() == 0
