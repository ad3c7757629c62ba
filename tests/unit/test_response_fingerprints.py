"""What makes a stored response a copy of another: its fingerprint, from the
webhook's delivery id or else from the body, for callbacks and Kafka messages."""

from __future__ import annotations

from typing import Any

from hipq.ingest.response_intake import new_response
from hipq.outcome_rules import ANY_RESPONSE


def webhook(body: Any, **headers: str) -> str | None:
    return new_response("k", body, source="webhook", rule=ANY_RESPONSE, headers=headers).fingerprint


def kafka(body: Any, headers: dict[str, bytes]) -> str | None:
    made = new_response("k", body, source="kafka:replies", rule=ANY_RESPONSE, headers=headers)
    return made.fingerprint


def test_the_same_body_is_a_copy_whatever_the_order_of_its_fields() -> None:
    assert webhook({"status": "no", "code": 51}) == webhook({"code": 51, "status": "no"})
    assert webhook({"status": "no"}) != webhook({"status": "ok"})
    assert webhook(None) != webhook("null")


def test_a_webhook_id_decides_over_the_body() -> None:
    assert webhook({"sent_at": 1}, **{"webhook-id": "m1"}) == webhook(
        {"sent_at": 2}, **{"webhook-id": "m1"}
    )
    assert webhook({"status": "no"}, **{"webhook-id": "m1"}) != webhook(
        {"status": "no"}, **{"webhook-id": "m2"}
    )


def test_a_kafka_message_is_told_by_its_body_alone() -> None:
    assert kafka({"status": "no"}, {"webhook-id": b"m1"}) == kafka(
        {"status": "no"}, {"webhook-id": b"m2"}
    )
    assert kafka({"status": "no"}, {}) == webhook({"status": "no"})


def test_integers_beyond_64_bits_have_a_fingerprint() -> None:
    assert webhook({"n": 2**70}) != webhook({"n": 2**70 + 1})
