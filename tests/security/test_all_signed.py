"""When every job type that takes callbacks requires signatures, an unsigned callback is
refused (401) instead of waiting in the inbox for days."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from hipq.security.signatures import signature_headers
from tests.external.test_http_callbacks import running_hipq
from tests.peers import free_port
from tests.security.conftest import SECRET, charge_types
from tests.support import make_settings


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    types: dict[str, Any] = charge_types("http://127.0.0.1:9")
    del types["charge"]  # every external type signed; the python test types take no callbacks
    settings = make_settings(
        database_url, job_types=types, server={"host": "127.0.0.1", "port": free_port()}
    )
    async with running_hipq(settings) as (_service, client):
        yield client


async def test_an_unsigned_callback_is_refused_when_every_type_is_signed(
    api: httpx.AsyncClient,
) -> None:
    body = b'{"status": "ok"}'
    for url in ("/v1/callbacks/k1", "/v1/callbacks/k1?type=ok"):
        refused = await api.post(url, content=body)
        assert refused.status_code == 401, refused.text
        assert refused.json()["field"] == "webhook-signature"
    assert (await api.get("/v1/responses")).json()["responses"] == []
    body = b'{"status": "ok", "correlation_key": "k1"}'
    headers = signature_headers(SECRET, "m1", int(time.time()), body)
    signed = await api.post("/v1/callbacks/k1?type=charge_signed", content=body, headers=headers)
    assert signed.status_code == 202, signed.text
