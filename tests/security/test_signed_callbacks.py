"""A job type that requires signed callbacks is settled only by a signed callback:
not through the operator's match by hand, not as a late success, not by a replay."""

from __future__ import annotations

import time

from hipq.security.signatures import signature_headers
from tests.security.conftest import SECRET, World

BODY = b'{"status": "ok", "forged": true}'


def body_for(key: str) -> bytes:
    """A signed body names its correlation key (callback_signature.key's default)."""
    return b'{"status": "ok", "correlation_key": "%s"}' % key.encode()


async def _unsigned(world: World, key: str) -> int:
    """An attacker's callback without ``?type=``: stored, as an unknown key would be."""
    stored = await world.api.post(f"/v1/callbacks/{key}", content=BODY)
    assert stored.status_code == 202, stored.text
    return stored.json()["response_id"]


async def test_match_by_hand_refuses_an_unsigned_response_for_a_signed_job(world: World) -> None:
    posted = await world.post("charge_signed", order_id="hand-1", behavior="hold")
    await world.reaches(posted["id"], "awaiting")
    forged = await _unsigned(world, "someone-else")
    refused = await world.api.post(f"/v1/responses/{forged}/match", json={"job_id": posted["id"]})
    assert refused.status_code == 409, refused.text
    assert refused.json()["field"] == "accept_unsigned"
    await world.service.loops["default"].run_once()
    assert await world.state(posted["id"]) == "awaiting"
    assert (await world.api.get(f"/v1/responses/{forged}")).json()["status"] == "pending"


async def test_an_operator_may_say_explicitly_that_an_unsigned_response_settles_it(
    world: World,
) -> None:
    posted = await world.post("charge_signed", order_id="hand-2", behavior="hold")
    await world.reaches(posted["id"], "awaiting")
    forged = await _unsigned(world, "phoned-in")
    matched = await world.api.post(
        f"/v1/responses/{forged}/match", json={"job_id": posted["id"], "accept_unsigned": True}
    )
    assert matched.status_code == 200, matched.text
    await world.reaches(posted["id"], "completed")


async def test_a_signed_response_matches_by_hand_without_saying_more(world: World) -> None:
    posted = await world.post("charge_signed", order_id="hand-3", behavior="hold")
    await world.reaches(posted["id"], "awaiting")
    # Signed by the sender for a key no job holds (its own typo).
    body = body_for("typo-key")
    headers = signature_headers(SECRET, "msg-hand-3", int(time.time()), body)
    stored = await world.api.post(
        "/v1/callbacks/typo-key?type=charge_signed", content=body, headers=headers
    )
    assert stored.status_code == 202, stored.text
    matched = await world.api.post(
        f"/v1/responses/{stored.json()['response_id']}/match", json={"job_id": posted["id"]}
    )
    assert matched.status_code == 200, matched.text
    await world.reaches(posted["id"], "completed")


async def test_an_unsigned_late_success_does_not_complete_a_signed_job(world: World) -> None:
    posted = await world.post("charge_signed_late", order_id="late-s1", behavior="hold")
    await world.reaches(posted["id"], "failed")  # timed out after 1s, no retries
    await _unsigned(world, "late-s1")
    assert (await world.service.upkeep.run_once())["late"] == 1
    for _ in range(3):
        await world.service.loops["default"].run_once()
    assert await world.state(posted["id"]) == "failed"
    # The signed late answer is still accepted.
    body = body_for("late-s1")
    headers = signature_headers(SECRET, "msg-late-s1", int(time.time()), body)
    signed = await world.api.post(
        "/v1/callbacks/late-s1?type=charge_signed_late", content=body, headers=headers
    )
    assert signed.status_code == 202, signed.text
    assert (await world.service.upkeep.run_once())["late"] == 1
    world.service.wake_all()
    await world.reaches(posted["id"], "completed")


async def test_a_replayed_signed_callback_is_a_duplicate_and_not_stored(world: World) -> None:
    body = body_for("replay-1")
    headers = signature_headers(SECRET, "msg-replay", int(time.time()), body)
    url = "/v1/callbacks/replay-1?type=charge_signed"
    first = await world.api.post(url, content=body, headers=headers)
    assert first.status_code == 202, first.text
    again = await world.api.post(url, content=body, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json() == {"status": "duplicate", "response_id": first.json()["response_id"]}
    stored = (await world.api.get("/v1/responses", params={"key": "replay-1"})).json()
    assert len(stored["responses"]) == 1
    # Another message (a new webhook-id) under the same key is stored.
    other = signature_headers(SECRET, "msg-replay-2", int(time.time()), body)
    assert (await world.api.post(url, content=body, headers=other)).status_code == 202
