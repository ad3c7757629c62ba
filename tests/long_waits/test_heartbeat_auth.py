"""The heartbeat route is protected exactly as the callback route of the same job
type: a signature, a callbacks token, or either, as the type's callback_auth says."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from hipq.security.signatures import signature_headers
from tests.api.conftest import Api, open_api
from tests.auth.conftest import SIGNED_SECRET, Tokens, write_tokens

OK = {"transport": {"python": {"handler": "tests.handlers:ok"}}, "heartbeat_timeout": "1m"}
TYPES = {
    "signed": {**OK, "callback_signature": {"secret": SIGNED_SECRET}},
    "either": {**OK, "callback_signature": {"secret": SIGNED_SECRET}, "callback_auth": "either"},
    "token": OK,
}
# Signed, it carries its key (callback_signature.key's default), as a callback's body.
BODY = orjson.dumps({"progress": 1, "correlation_key": "k-1"})
UNSIGNED_BODY = orjson.dumps({"progress": 1})
_ids = itertools.count()


@pytest.fixture
def tokens(tmp_path: Path) -> Tokens:
    return write_tokens(tmp_path / "tokens")


@pytest.fixture
async def authed(database_url: str, tokens: Tokens) -> AsyncIterator[Api]:
    async with open_api(
        database_url, auth={"tokens_file": str(tokens.file)}, job_types=TYPES
    ) as opened:
        yield opened


def _credentials(api: Api, tokens: Tokens, kind: str) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if kind == "signature":
        now = int(api.clock().timestamp())
        headers |= signature_headers(SIGNED_SECRET, f"msg-{next(_ids)}", now, BODY)
    elif kind != "nothing":
        headers |= tokens.header(kind)
    return headers


def _verdict(status: int, passed: int) -> str:
    if status == passed:
        return "let through"
    assert status in (401, 403), status
    return "refused"


async def test_heartbeats_are_let_through_exactly_when_callbacks_are(
    authed: Api, tokens: Tokens
) -> None:
    seen = {}
    for job_type, kind in itertools.product(
        TYPES, ("nothing", "signature", "callbacks", "read", "submit", "admin")
    ):
        callback = await authed.client.post(
            f"/v1/callbacks/k-1?type={job_type}",
            content=BODY,
            headers=_credentials(authed, tokens, kind),
        )
        heartbeat = await authed.client.post(
            f"/v1/callbacks/k-1/heartbeat?type={job_type}",
            # Unsigned, a heartbeat's body holds only what it says (progress, checkpoint).
            content=BODY if "callback_signature" in TYPES[job_type] else UNSIGNED_BODY,
            headers=_credentials(authed, tokens, kind),
        )
        # Let through, the callback is stored (202); the heartbeat finds no job (404).
        callback_verdict = _verdict(callback.status_code, 202)
        assert _verdict(heartbeat.status_code, 404) == callback_verdict, (job_type, kind)
        seen[(job_type, kind)] = callback_verdict
    # The matrix is not trivial: each type lets some through and refuses others.
    assert seen[("signed", "signature")] == seen[("either", "callbacks")] == "let through"
    assert seen[("signed", "callbacks")] == seen[("token", "signature")] == "refused"
    assert seen[("token", "nothing")] == seen[("either", "read")] == "refused"
