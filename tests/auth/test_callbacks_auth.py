"""The callback route: a Standard Webhooks signature or a callbacks token, as the job type says."""

from __future__ import annotations

import orjson

from hipq.security.signatures import signature_headers
from tests.api.conftest import Api
from tests.auth.conftest import SIGNED_SECRET, Tokens


def _signed(api: Api, body: bytes, msg_id: str = "msg-1") -> dict[str, str]:
    now = int(api.clock().timestamp())
    return {
        "content-type": "application/json",
        **signature_headers(SIGNED_SECRET, msg_id, now, body),
    }


BODY = orjson.dumps({"status": "ok"})


def body_for(key: str) -> bytes:
    """A signed body carries its correlation key (callback_signature.key's default)."""
    return orjson.dumps({"status": "ok", "correlation_key": key})


async def test_a_signed_type_takes_a_signature_without_a_token(authed: Api) -> None:
    body = body_for("k-1")
    signed = await authed.client.post(
        "/v1/callbacks/k-1?type=signed", content=body, headers=_signed(authed, body)
    )
    assert signed.status_code == 202, signed.text
    unsigned = await authed.client.post("/v1/callbacks/k-1?type=signed", content=BODY)
    assert unsigned.status_code == 401
    assert unsigned.json()["field"] == "webhook-signature"


async def test_a_signature_only_type_still_needs_the_signature_with_a_token(
    authed: Api, tokens: Tokens
) -> None:
    # callback_auth defaults to signature when the type has a secret: a callbacks token
    # is no substitute for it.
    response = await authed.client.post(
        "/v1/callbacks/k-1?type=signed", content=BODY, headers=tokens.header("callbacks")
    )
    assert response.status_code == 401
    assert response.json()["field"] == "webhook-signature"


async def test_either_takes_a_token_or_a_signature(authed: Api, tokens: Tokens) -> None:
    by_token = await authed.client.post(
        "/v1/callbacks/k-1?type=either", content=BODY, headers=tokens.header("callbacks")
    )
    assert by_token.status_code == 202, by_token.text
    body = body_for("k-2")
    by_signature = await authed.client.post(
        "/v1/callbacks/k-2?type=either", content=body, headers=_signed(authed, body, "msg-2")
    )
    assert by_signature.status_code == 202, by_signature.text
    neither = await authed.client.post("/v1/callbacks/k-3?type=either", content=BODY)
    assert neither.status_code == 401
    # A token without the callbacks scope does not stand in for the signature.
    read_only = await authed.client.post(
        "/v1/callbacks/k-3?type=either", content=BODY, headers=tokens.header("read")
    )
    assert read_only.status_code == 401
    assert read_only.json()["field"] == "webhook-signature"


async def test_a_type_without_a_secret_and_no_type_need_a_callbacks_token(
    authed: Api, tokens: Tokens
) -> None:
    for path in ("/v1/callbacks/k-1?type=ok", "/v1/callbacks/k-1", "/v1/callbacks/k-1?type=nope"):
        missing = await authed.client.post(path, content=BODY)
        assert missing.status_code == 401, path
        wrong = await authed.client.post(path, content=BODY, headers=tokens.header("submit"))
        assert wrong.status_code == 403, path
    ok = await authed.client.post(
        "/v1/callbacks/k-1?type=ok", content=BODY, headers=tokens.header("callbacks")
    )
    assert ok.status_code == 202


async def test_match_by_hand_needs_operate(authed: Api, tokens: Tokens) -> None:
    stored = await authed.client.post(
        "/v1/callbacks/k-9", content=BODY, headers=tokens.header("callbacks")
    )
    response_id = stored.json()["response_id"]
    job = await authed.client.post("/v1/jobs", json={"type": "ok"}, headers=tokens.header("submit"))
    match = {"job_id": job.json()["id"]}
    path = f"/v1/responses/{response_id}/match"
    for scope in ("submit", "read", "callbacks"):
        refused = await authed.client.post(path, json=match, headers=tokens.header(scope))
        assert refused.status_code == 403, scope
    assert (await authed.client.post(path, json=match)).status_code == 401
