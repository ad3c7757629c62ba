"""Schemathesis over the whole served schema, against hipq on a loopback port: every
answer conforms to the schema (status code, content type, headers, body) and nothing
answers 5xx. Both engines, with tokens (an admin token sent) and without.

Requests come from the schema alone (positive: valid by the schema; negative: invalid
by it, which hipq must refuse with a 4xx), and, for the routes that take an id or a
name, also with the id of a job, response, bulk operation or schedule that exists, so
that real objects are read and changed too. The hypothesis fuzz of the Authorization
header (tests/auth/test_fuzz.py) stays: it sends what no schema describes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from hipq.app import create_app
from tests.api.conftest import Api
from tests.auth.conftest import Tokens
from tests.auth.conftest import authed as authed  # a fixture: the API with tokens
from tests.auth.conftest import tokens as tokens  # a fixture: one token per scope
from tests.peers import serve_app

EXAMPLES = 300  # per engine and token setting
CHECKS: list[Callable[..., Any]] = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


async def _seed(api: Api, headers: dict[str, str]) -> dict[str, Any]:
    """Objects the requests may name: a job, a response, a bulk operation, a schedule."""
    client = api.client
    job = await client.post("/v1/jobs", json={"type": "ok"}, headers=headers)
    assert job.status_code == 201, job.text
    callback = await client.post("/v1/callbacks/seeded-key", json={"status": "ok"}, headers=headers)
    assert callback.status_code == 202, callback.text
    bulk = await client.post(
        "/v1/jobs/bulk",
        json={"action": "cancel", "filter": {"queue": "bulk"}},
        headers=headers,
    )
    assert bulk.status_code == 202, bulk.text
    schedule = await client.post(
        "/v1/schedules",
        json={"name": "nightly", "cron": "0 3 * * *", "job": {"type": "ok"}},
        headers=headers,
    )
    assert schedule.status_code == 201, schedule.text
    return {
        "job_id": job.json()["id"],
        "response_id": callback.json()["response_id"],
        "bulk_id": bulk.json()["id"],
        "schedule": "nightly",
    }


def _strategy(schema: Any, seeded: dict[str, Any]) -> st.SearchStrategy[Case]:
    strategies = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategies.append(operation.as_strategy(generation_mode=mode))
        path = operation.path
        known: dict[str, Any] = {}
        for name in ("job_id", "response_id", "bulk_id"):
            if "{" + name + "}" in path:
                known[name] = seeded[name]
        if path.startswith("/v1/queues/{name}"):
            known["name"] = "default"
        elif path.startswith("/v1/schedules/{name}"):
            known["name"] = seeded["schedule"]
        if known:
            strategies.append(operation.as_strategy(path_parameters=known))
    return st.one_of(strategies)


def _rejection(case: Case) -> list[Callable[..., Any]]:
    """Invalid data must be refused when it is a body or a path parameter. A query or
    header value is text on the wire whatever its schema's type (an object drawn for a
    string parameter arrives as a string it accepts), so only the body and the path
    are held to it; the query's ints and enums are refused by the positive checks'
    422s all the same."""
    if case.meta is None or case.meta.generation.mode != GenerationMode.NEGATIVE:
        return []
    negated = {
        location.value
        for location, info in case.meta.components.items()
        if info.mode == GenerationMode.NEGATIVE
    }
    return [negative_data_rejection] if negated <= {"body", "path"} else []


def _open(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as it holds without tokens: hipq is open, no operation needs one."""
    for item in schema["paths"].values():
        for operation in item.values():
            operation.pop("security", None)
    return schema


async def _run(api: Api, headers: dict[str, str]) -> None:
    seeded = await _seed(api, headers)
    app = create_app(api.service, manage_service=False)
    async with serve_app(app) as base_url:
        raw = (await api.client.get("/openapi.json")).json()
        if not headers:
            raw = _open(raw)
        schema = schemathesis.openapi.from_dict(raw)
        statuses: list[int] = []

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=_strategy(schema, seeded))
        def check(case: Case) -> None:
            response = case.call(base_url=base_url, headers=headers, timeout=30)
            statuses.append(response.status_code)
            case.validate_response(response, checks=CHECKS + _rejection(case), headers=headers)

        await asyncio.to_thread(check)
    assert len(statuses) >= EXAMPLES
    # The seeded ids reached real objects: some answers were successes.
    assert any(200 <= s < 300 for s in statuses), statuses


async def test_schema_holds_without_tokens(api: Api) -> None:
    await _run(api, {})


async def test_schema_holds_with_tokens(authed: Api, tokens: Tokens) -> None:
    await _run(authed, tokens.header("admin"))


# Non-conformances the fuzz found, pinned as plain tests.


async def test_a_callback_body_that_is_a_bare_number_is_listed(api: Api) -> None:
    # SQLite stored such a body as a number and /v1/responses answered 500 reading it.
    for body in (b"5", b"-1.5", b'"7"'):
        response = await api.client.post(
            "/v1/callbacks/numbers", content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 202, response.text
    listed = await api.client.get("/v1/responses", params={"key": "numbers"})
    assert listed.status_code == 200, listed.text
    assert sorted(map(str, (r["body"] for r in listed.json()["responses"]))) == ["-1.5", "5", "7"]


async def test_a_callback_body_that_is_a_too_large_integer_is_refused(api: Api) -> None:
    # It reached the database's JSON encoder, which failed: a 500.
    response = await api.client.post(
        "/v1/callbacks/big",
        content=b"12345678901234567890123",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "body"


async def test_a_schedule_name_holding_nul_is_refused(api: Api) -> None:
    # PostgreSQL cannot compare text holding U+0000: the lookup was a 500 there.
    read = await api.client.get("/v1/schedules/%00")
    assert read.status_code == 422, read.text
    assert read.json()["field"] == "name"
    created = await api.client.post(
        "/v1/schedules", json={"name": "a\u0000b", "cron": "0 3 * * *", "job": {"type": "ok"}}
    )
    assert created.status_code == 422, created.text
    assert created.json()["field"] == "name"


async def test_a_verbs_reason_or_result_holding_nul_is_refused(api: Api) -> None:
    # PostgreSQL cannot store U+0000 in text or jsonb: fail with such a reason was a 500.
    job = (await api.client.post("/v1/jobs", json={"type": "ok"})).json()
    for verb, body, field in [
        ("fail", {"reason": "\u0000\u00d2<"}, "reason"),
        ("cancel", {"reason": "a\u0000"}, "reason"),
        ("complete", {"result": {"k": ["x\u0000"]}}, "result"),
    ]:
        refused = await api.client.post(f"/v1/jobs/{job['id']}/{verb}", json=body)
        assert refused.status_code == 422, refused.text
        assert refused.json()["field"] == field, refused.text
        assert "NUL" in refused.json()["message"]
    unchanged = (await api.client.get(f"/v1/jobs/{job['id']}")).json()
    assert unchanged["state"] == "scheduled" and unchanged["last_error"] is None
