"""A token never appears in a response, an error, a log line or a metric."""

from __future__ import annotations

import logging

import pytest

from tests.api.conftest import Api
from tests.auth.conftest import Tokens


async def test_tokens_appear_in_no_response_log_or_metric(
    authed: Api, tokens: Tokens, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secrets = tokens.all_secrets()
    near_misses = [s[:-1] + ("A" if s[-1] != "A" else "B") for s in secrets]
    seen: list[str] = []
    for presented in [*secrets, *near_misses]:
        headers = {"Authorization": f"Bearer {presented}"}
        for method, path, body in (
            ("POST", "/v1/jobs", {"type": "ok"}),
            ("POST", "/v1/jobs", {"type": "nope"}),
            ("POST", "/v1/jobs", {"type": "ok", "bogus": 1}),
            ("GET", "/v1/jobs", None),
            ("GET", "/v1/jobs/999", None),
            ("POST", "/v1/queues/nope/pause", None),
            ("POST", "/v1/callbacks/k?type=signed", {"x": 1}),
            ("POST", "/v1/callbacks/k", {"x": 1}),
            ("GET", "/readyz", None),
            ("GET", "/metrics", None),
        ):
            response = await authed.client.request(method, path, json=body, headers=headers)
            seen.append(f"{response.status_code} {response.headers} {response.text}")
    statuses = {line.split()[0] for line in seen}
    assert {"200", "201", "202", "401", "403", "404", "422"} <= statuses
    # The stored callback kept its headers: the Authorization header is dropped.
    listed = await authed.client.get("/v1/responses", headers=tokens.header("read"))
    seen.append(listed.text)
    seen.append((await authed.client.get("/openapi.json")).text)
    everything = "\n".join(seen) + "\n" + caplog.text
    for secret in [*secrets, *near_misses]:
        assert secret not in everything
        assert secret[5:] not in everything  # also without its hipq_ prefix
