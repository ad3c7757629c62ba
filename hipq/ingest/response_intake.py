"""Turning a received response (a webhook call or a Kafka message) into a ``NewResponse``.

Both response sources check the correlation key and the body the same way and
judge the response by an outcome rule; each words a refusal its own way (the
webhook answers 422, the consumer parks the message with a reason).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

from hipq.outcome_rules import OutcomeRule, decide
from hipq.storable_text import NUL_MESSAGE, SURROGATE_MESSAGE, nul_field, surrogate_field
from hipq.store import NewResponse
from hipq.store.schema import KEY_MAX_LENGTH
from hipq.templates import KeyTemplate, TemplateError

# Standard Webhooks senders keep a message's ``webhook-id`` across its redeliveries.
WEBHOOK_ID = "webhook-id"
# Never stored or shown with a response: credentials, and a signed message's headers
# (with them and its body anyone who may read responses could deliver it again).
HIDDEN_HEADERS = frozenset(
    {
        "authorization",
        "cookie",
        "proxy-authorization",
        "x-api-key",
        WEBHOOK_ID,
        "webhook-timestamp",
        "webhook-signature",
    }
)
# Names that say a header carries a credential or a signature (``api-key``,
# ``x-auth-token``, ``stripe-signature``, ``x-hub-signature-256``...): not kept either.
_SECRET_LOOKING = re.compile(r"auth|token|secret|signature|api-?key|password|session|cookie")

# The callback route's sibling: POST /v1/callbacks/{key}/heartbeat.
HEARTBEAT_SUFFIX = "/heartbeat"

# C0 and C1 control characters and DEL.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

__all__ = [
    "ResponseRefused",
    "callback_key_problem",
    "check_body",
    "check_callback_key",
    "check_key",
    "fingerprint",
    "new_response",
    "route_key_problem",
    "shown_headers",
    "signed_key_problem",
]


class ResponseRefused(ValueError):
    """A response that cannot be stored; ``field`` names the part at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def check_key(key: str) -> None:
    """Refuse a correlation key longer than the inbox column or holding U+0000."""
    if len(key) > KEY_MAX_LENGTH:
        raise ResponseRefused("key", f"a correlation key has at most {KEY_MAX_LENGTH} characters")
    if "\x00" in key:
        raise ResponseRefused("key", NUL_MESSAGE)


def route_key_problem(key: str, what: str) -> str | None:
    """Why ``key`` cannot be carried as the end of a route's path (None if it can).

    Such a route (``{key:path}``) matches no empty key and no line break, an HTTP
    client cannot be trusted with other control characters, and clients remove the
    path segments ``.`` and ``..`` (RFC 3986) before they send: a job with such a key
    could never be reached by it.
    """
    if not key:
        return f"a {what} must not be empty"
    if _CONTROL.search(key):
        return f"a {what} must not contain control characters (such as a newline)"
    if key in (".", ".."):
        return f"a {what} cannot be '.' or '..' (clients remove such a URL path segment)"
    return None


def callback_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be carried by the callback URL ``/v1/callbacks/{key}`` (None
    if it can): see ``route_key_problem``; and a key ending in ``/heartbeat`` would
    have its callbacks taken by the heartbeat route (the job would time out)."""
    if problem := route_key_problem(key, "correlation key"):
        return problem
    if key.endswith(HEARTBEAT_SUFFIX):
        return (
            f"a correlation key must not end in {HEARTBEAT_SUFFIX!r} "
            "(its callback would reach the heartbeat route)"
        )
    return None


def check_callback_key(key: str) -> None:
    """Refuse a key a callback URL cannot carry, as :func:`check_key` does the rest."""
    if problem := callback_key_problem(key):
        raise ResponseRefused("key", problem)
    check_key(key)


def check_body(body: Any, where: str) -> None:
    """Refuse a body holding U+0000 or a lone surrogate, which no JSON column stores
    (``where`` names the body in the error's field)."""
    if found := nul_field(body, where):
        raise ResponseRefused(found, NUL_MESSAGE)
    if found := surrogate_field(body, where):
        raise ResponseRefused(found, SURROGATE_MESSAGE)


def new_response(
    key: str,
    body: Any,
    *,
    source: str,
    rule: OutcomeRule,
    headers: Mapping[str, Any],
    kept_headers: dict[str, str] | None = None,
    job_type: str | None = None,
) -> NewResponse:
    """The response as stored, judged by ``rule`` on ``body`` and ``headers``.

    ``kept_headers`` (default: ``headers``) are stored with it: a Kafka message's
    header values are bytes for the rule but text for an operator to read.
    """
    check_key(key)
    # A Kafka message carries no delivery id of its own (its headers are the
    # producer's): its body tells a copy.
    delivery_id = headers.get(WEBHOOK_ID) if source == "webhook" else None
    judgement = decide(rule, body, headers)
    return NewResponse(
        correlation_key=key,
        source=source,
        succeeded=judgement.succeeded,
        reason=None if judgement.succeeded else judgement.reason,
        body=body,
        headers=dict(headers) if kept_headers is None else kept_headers,
        job_type=job_type,
        fingerprint=fingerprint(body, delivery_id if isinstance(delivery_id, str) else None),
    )


def fingerprint(body: Any, delivery_id: str | None = None) -> str:
    """What a copy of a response shares with the response it copies: the sender's
    delivery id if it gives one, else the body (JSON with sorted keys), as SHA-256.

    Compared only between responses under the same correlation key."""
    if delivery_id:
        seed = b"id:" + delivery_id.encode("utf-8", "surrogatepass")
    else:
        try:
            text = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # integers over 64 bits: the slower writer takes them
            text = json.dumps(body, sort_keys=True).encode()
        seed = b"body:" + text
    return hashlib.sha256(seed).hexdigest()


def shown_headers(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """``headers`` without those never kept (rows stored before they were dropped)."""
    if headers is None:
        return None
    return {k: v for k, v in headers.items() if not hidden_header(k)}


def hidden_header(name: str) -> bool:
    """Whether a header is never stored nor shown with a response."""
    lowered = name.lower()
    return lowered in HIDDEN_HEADERS or _SECRET_LOOKING.search(lowered) is not None


def signed_key_problem(template: KeyTemplate, body: Any, key: str) -> str | None:
    """Why a signed message whose body is ``body`` may not settle the job holding
    ``key`` (None if it may): the URL's key is not signed, so the body must carry it
    where the job type's ``callback_signature.key`` says."""
    if not isinstance(body, dict):
        return f"the signed body is not a JSON object carrying the correlation key ({template})"
    try:
        signed = template.render({"body": body})
    except TemplateError as exc:
        return f"the signed body carries no correlation key at {template}: {exc}"
    if signed != key:
        return f"the signed body is for another correlation key ({template}) than the URL's"
    return None
