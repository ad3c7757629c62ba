"""Fuzz every route of the OpenAPI schema, with and without tokens: nothing answers 5xx.

Hypothesis draws an operation, its path and query values, a body (JSON of any shape, or
bytes) and an Authorization header (none, malformed, unknown, or a token of each scope).
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import Api
from tests.auth.conftest import Tokens

EXAMPLES = 150

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
_json = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
_values = st.one_of(st.integers(min_value=-5, max_value=2**64), st.text(max_size=40))


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    return [
        (method.upper(), path, op.get("parameters", []))
        for path, item in schema["paths"].items()
        for method, op in item.items()
    ]


def _request(
    operation: tuple[str, str, list[dict[str, Any]]],
    values: st.DataObject,
    headers: list[dict[str, str]],
) -> tuple[str, str, dict[str, Any]]:
    method, path, parameters = operation
    query: dict[str, str] = {}
    for parameter in parameters:
        value = str(values.draw(_values))
        if parameter["in"] == "path":
            path = path.replace("{" + parameter["name"] + "}", quote(value, safe=""))
            path = path.replace("{" + parameter["name"] + ":path}", quote(value, safe=""))
        elif parameter["in"] == "query" and values.draw(st.booleans()):
            query[parameter["name"]] = value
    kwargs: dict[str, Any] = {"params": query, "headers": values.draw(st.sampled_from(headers))}
    if method in ("POST", "PATCH", "PUT"):
        body = values.draw(
            st.one_of(
                _json.map(lambda v: ("json", v)),
                st.binary(max_size=64).map(lambda v: ("content", v)),
            )
        )
        kwargs[body[0]] = body[1]
    return method, path, kwargs


async def _fuzz(api: Api, headers: list[dict[str, str]]) -> None:
    schema = (await api.client.get("/openapi.json")).json()
    operations = _operations(schema)
    assert len(operations) >= 18
    loop = asyncio.get_running_loop()
    seen: list[int] = []

    def send(method: str, path: str, kwargs: dict[str, Any]) -> httpx.Response:
        call = api.client.request(method, path, **kwargs)
        return asyncio.run_coroutine_threadsafe(call, loop).result(timeout=60)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(operation=st.sampled_from(operations), values=st.data())
    def check(operation: tuple[str, str, list[dict[str, Any]]], values: st.DataObject) -> None:
        method, path, kwargs = _request(operation, values, headers)
        response = send(method, path, kwargs)
        seen.append(response.status_code)
        assert response.status_code < 500, (method, path, kwargs, response.text)
        if response.status_code >= 400:
            assert response.headers["content-type"].startswith("application/json"), path
            assert "error" in response.json()

    await asyncio.to_thread(check)
    assert len(seen) >= EXAMPLES


async def test_fuzz_with_tokens(authed: Api, tokens: Tokens) -> None:
    headers = [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer hipq_unknown"},
        {"Authorization": "Basic Zm9vOmJhcg=="},
        {"Authorization": "bearer \x7f\t"},
        *({"Authorization": f"Bearer {token}"} for token in tokens.all_secrets()),
    ]
    await _fuzz(authed, headers)


async def test_fuzz_without_tokens(api: Api) -> None:
    await _fuzz(api, [{}, {"Authorization": "Bearer anything"}])
