"""Standard Webhooks signatures (https://www.standardwebhooks.com).

A signed request carries three headers:

* ``webhook-id``: the message id;
* ``webhook-timestamp``: integer unix seconds;
* ``webhook-signature``: space-separated ``v1,<base64>`` entries, each an
  HMAC-SHA256 of ``f"{id}.{timestamp}.{body}"``. Any one valid entry suffices
  (that is how a sender rotates its secret); entries of other versions, such as
  the asymmetric ``v1a``, are ignored.

Secrets: ``whsec_<base64>`` is decoded from base64 (padding optional), as the
specification says. Any other string is used as its own UTF-8 bytes, and
``bytes`` are used as they are. Note that the reference libraries base64-decode
an unprefixed string instead, so write a base64 secret shared with them with its
``whsec_`` prefix.

Why not the ``standardwebhooks`` package from PyPI (1.1.0, MIT, no
dependencies, installs cleanly)? Its ``Webhook.verify`` reads the wall clock
itself and hard-codes a 5-minute tolerance, so neither ``now`` nor the tolerance
can be given (the batch loop and the tests need both); it decodes the body as
UTF-8 text, so a non-UTF-8 body cannot be verified; it re-derives the signed
timestamp from a parsed float rather than the header text; and it reports every
failure as one generic error class with terse messages. Wrapping it would mean
re-implementing the timestamp check anyway, and the scheme itself is a dozen
lines of ``hmac``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

__all__ = [
    "DEFAULT_TOLERANCE_SECONDS",
    "SECRET_PREFIX",
    "SignatureError",
    "decode_secret",
    "sign",
    "signature_headers",
    "verify",
]

SECRET_PREFIX = "whsec_"
# The window the specification and its reference libraries use.
DEFAULT_TOLERANCE_SECONDS = 300
# Unix seconds stay below 12 digits for thirty thousand years.
_MAX_TIMESTAMP_DIGITS = 12


class SignatureError(ValueError):
    """A request whose signature does not verify; ``reason`` says why.

    The caller answers it with 401; the sender retrying the same bytes will not
    make it pass.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def decode_secret(secret: str | bytes) -> bytes:
    """The HMAC key for ``secret`` (see the module notes on the accepted forms)."""
    if isinstance(secret, bytes | bytearray):
        key = bytes(secret)
    elif isinstance(secret, str):
        if secret.startswith(SECRET_PREFIX):
            encoded = secret[len(SECRET_PREFIX) :]
            try:
                key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
            except (binascii.Error, ValueError):
                raise SignatureError("the webhook secret after 'whsec_' is not base64") from None
        else:
            key = secret.encode("utf-8")
    else:
        raise TypeError(f"a webhook secret is str or bytes, not {type(secret).__name__}")
    if not key:
        raise SignatureError("the webhook secret is empty")
    return key


def sign(secret: str | bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value (one ``v1,<base64>`` entry) for a message."""
    # A float would print as "1614265330.0" and sign a different message than
    # the integer header the receiver sees.
    if isinstance(timestamp, bool) or not isinstance(timestamp, int):
        raise TypeError(f"timestamp is integer unix seconds, not {type(timestamp).__name__}")
    return _signature(decode_secret(secret), msg_id, str(timestamp), bytes(body))


def signature_headers(
    secret: str | bytes, msg_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three headers a sender adds to a signed request."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, msg_id, timestamp, body),
    }


def verify(
    secret: str | bytes,
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
) -> None:
    """Check a received request; raise :class:`SignatureError` unless it is authentic.

    ``body`` must be the raw bytes as received: re-serialised JSON differs in
    whitespace or key order and will not verify. ``now`` is unix seconds.
    Header names are matched case-insensitively.
    """
    if tolerance_seconds < 0:
        raise ValueError("tolerance_seconds must not be negative")
    key = decode_secret(secret)
    msg_id = _header(headers, "webhook-id")
    timestamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")

    # The timestamp is checked before the signature, as the specification
    # orders it: a replayed old request is rejected without HMAC work.
    if not (timestamp.isascii() and timestamp.isdigit()):
        raise SignatureError("webhook-timestamp is not integer unix seconds")
    if len(timestamp) > _MAX_TIMESTAMP_DIGITS:
        # A float cannot hold it (now - int(...) would overflow): far outside any tolerance.
        raise SignatureError("webhook-timestamp is out of range")
    age = now - int(timestamp)
    if abs(age) > tolerance_seconds:
        when = f"{int(age)}s old" if age > 0 else f"{int(-age)}s in the future"
        raise SignatureError(
            f"timestamp outside the tolerance ({when}, tolerance {tolerance_seconds}s)"
        )

    # The header text, not a re-formatted number, is what the sender signed.
    expected = _digest(key, msg_id, timestamp, bytes(body))
    candidates = 0
    for entry in signatures.split():
        version, sep, encoded = entry.partition(",")
        if not sep or version != "v1":
            continue  # another scheme or a malformed entry: not ours to judge
        candidates += 1
        try:
            given = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(expected, given):
            return
    if not candidates:
        raise SignatureError("no matching signature (no v1 entry in webhook-signature)")
    raise SignatureError("no matching signature")


def _digest(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    # Bytes, not text: the body may be any bytes, and must be signed exactly.
    content = f"{msg_id}.{timestamp}.".encode() + body
    return hmac.new(key, content, hashlib.sha256).digest()


def _signature(key: bytes, msg_id: str, timestamp: str, body: bytes) -> str:
    return "v1," + base64.b64encode(_digest(key, msg_id, timestamp, body)).decode("ascii")


def _header(headers: Mapping[str, Any], name: str) -> str:
    value = headers.get(name)
    if value is None:
        # HTTP header names are case-insensitive; a plain dict is not.
        for key, candidate in headers.items():
            if isinstance(key, str) and key.lower() == name:
                value = candidate
                break
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("latin-1")
    if not value or not isinstance(value, str) or not value.strip():
        raise SignatureError(f"missing {name} header")
    return value.strip()
