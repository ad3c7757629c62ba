import base64
import hashlib
import hmac

import pytest

from hipq.security.signatures import (
    SignatureError,
    decode_secret,
    sign,
    signature_headers,
    verify,
)

# The test vector published with the Standard Webhooks specification.
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TS = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

KEY = b"0123456789abcdef0123456789abcdef"
SECRET = "whsec_" + base64.b64encode(KEY).decode()
MSG_ID = "msg_1"
TS = 1_700_000_000
BODY = b'{"order_id":"A-17","status":"ok"}'


def by_hand(key: bytes, msg_id: str, ts: int, body: bytes) -> str:
    """The signature computed independently of the module under test."""
    mac = hmac.new(key, msg_id.encode() + b"." + str(ts).encode() + b"." + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def headers(signature: str, msg_id: str = MSG_ID, ts: object = TS) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": signature}


# --- signing ---------------------------------------------------------------


def test_spec_vector() -> None:
    assert sign(SPEC_SECRET, SPEC_ID, SPEC_TS, SPEC_BODY) == SPEC_SIGNATURE
    verify(SPEC_SECRET, headers(SPEC_SIGNATURE, SPEC_ID, SPEC_TS), SPEC_BODY, now=SPEC_TS)


def test_sign_matches_an_hmac_computed_by_hand() -> None:
    assert sign(SECRET, MSG_ID, TS, BODY) == by_hand(KEY, MSG_ID, TS, BODY)


def test_signature_headers() -> None:
    assert signature_headers(SECRET, MSG_ID, TS, BODY) == headers(by_hand(KEY, MSG_ID, TS, BODY))


def test_non_utf8_body_is_signed_as_bytes() -> None:
    body = b"\xff\x00\xfe"
    signature = sign(SECRET, MSG_ID, TS, body)
    assert signature == by_hand(KEY, MSG_ID, TS, body)
    verify(SECRET, headers(signature), body, now=TS)


@pytest.mark.parametrize("ts", [1.5, float(TS), True, "1700000000"])
def test_sign_wants_integer_seconds(ts: object) -> None:
    with pytest.raises(TypeError):
        sign(SECRET, MSG_ID, ts, BODY)  # type: ignore[arg-type]


# --- secrets ---------------------------------------------------------------


def test_whsec_secret_is_base64_with_optional_padding() -> None:
    assert decode_secret(SECRET) == KEY
    assert decode_secret("whsec_" + base64.b64encode(b"abcd1").decode().rstrip("=")) == b"abcd1"


def test_other_strings_and_bytes_are_used_as_they_are() -> None:
    assert decode_secret("plain secret") == b"plain secret"
    assert decode_secret(b"\x00raw") == b"\x00raw"
    assert sign("plain secret", MSG_ID, TS, BODY) == by_hand(b"plain secret", MSG_ID, TS, BODY)


@pytest.mark.parametrize("secret", ["", b"", "whsec_", "whsec_not base64!"])
def test_bad_secrets_are_refused(secret: str | bytes) -> None:
    with pytest.raises(SignatureError, match="secret"):
        decode_secret(secret)


def test_secret_of_wrong_type_is_refused() -> None:
    with pytest.raises(TypeError):
        decode_secret(123)  # type: ignore[arg-type]


# --- verifying -------------------------------------------------------------


def test_valid_request_passes() -> None:
    verify(SECRET, headers(by_hand(KEY, MSG_ID, TS, BODY)), BODY, now=TS + 10)


def test_any_one_of_several_signatures_suffices() -> None:
    good = by_hand(KEY, MSG_ID, TS, BODY)
    other = by_hand(b"another key", MSG_ID, TS, BODY)
    verify(SECRET, headers(f"{other} v1a,c29tZXRoaW5n garbage v1,!!! {good}"), BODY, now=TS)
    verify(SECRET, headers(f"{good}  {other}"), BODY, now=TS)


def test_header_names_are_case_insensitive() -> None:
    h = {k.title(): v for k, v in headers(by_hand(KEY, MSG_ID, TS, BODY)).items()}
    verify(SECRET, h, BODY, now=TS)


def test_tampered_body_fails() -> None:
    with pytest.raises(SignatureError, match=r"^no matching signature$"):
        verify(SECRET, headers(by_hand(KEY, MSG_ID, TS, BODY)), BODY + b" ", now=TS)


def test_wrong_secret_fails() -> None:
    with pytest.raises(SignatureError, match="no matching signature"):
        verify(
            "whsec_" + base64.b64encode(b"x" * 32).decode(),
            headers(sign(SECRET, MSG_ID, TS, BODY)),
            BODY,
            now=TS,
        )


def test_changed_id_or_timestamp_fails() -> None:
    signature = by_hand(KEY, MSG_ID, TS, BODY)
    with pytest.raises(SignatureError, match="no matching signature"):
        verify(SECRET, headers(signature, msg_id="msg_2"), BODY, now=TS)
    with pytest.raises(SignatureError, match="no matching signature"):
        verify(SECRET, headers(signature, ts=TS + 1), BODY, now=TS)


def test_timestamp_is_signed_as_sent() -> None:
    # A leading zero is the same number but a different signed message.
    signature = by_hand(KEY, MSG_ID, TS, BODY)
    with pytest.raises(SignatureError, match="no matching signature"):
        verify(SECRET, headers(signature, ts=f"0{TS}"), BODY, now=TS)


@pytest.mark.parametrize("value", ["v2,abc", "v1", "nonsense", "v1a,c29tZXRoaW5n"])
def test_no_v1_entry(value: str) -> None:
    with pytest.raises(SignatureError, match="no matching signature"):
        verify(SECRET, headers(value), BODY, now=TS)


def test_undecodable_signature_does_not_crash() -> None:
    with pytest.raises(SignatureError, match=r"^no matching signature$"):
        verify(SECRET, headers("v1,***not-base64***"), BODY, now=TS)


@pytest.mark.parametrize("name", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_header(name: str) -> None:
    h = headers(by_hand(KEY, MSG_ID, TS, BODY))
    del h[name]
    with pytest.raises(SignatureError, match=f"missing {name} header") as info:
        verify(SECRET, h, BODY, now=TS)
    assert info.value.reason == f"missing {name} header"
    assert isinstance(info.value, ValueError)


def test_empty_header_counts_as_missing() -> None:
    with pytest.raises(SignatureError, match="missing webhook-signature header"):
        verify(SECRET, headers("  "), BODY, now=TS)


# Full-width digits pass str.isdigit() but are not a timestamp.
@pytest.mark.parametrize("ts", ["soon", "1.7e9", "-5", "\uff11\uff12\uff13", ""])
def test_timestamp_must_be_integer_seconds(ts: str) -> None:
    h = headers(by_hand(KEY, MSG_ID, TS, BODY), ts=ts)
    with pytest.raises(SignatureError, match="webhook-timestamp"):
        verify(SECRET, h, BODY, now=TS)


def test_timestamp_tolerance_both_ways() -> None:
    h = headers(by_hand(KEY, MSG_ID, TS, BODY))
    verify(SECRET, h, BODY, now=TS + 300)
    verify(SECRET, h, BODY, now=TS - 300)
    with pytest.raises(SignatureError, match=r"timestamp outside the tolerance \(301s old"):
        verify(SECRET, h, BODY, now=TS + 301)
    with pytest.raises(SignatureError, match=r"timestamp outside the tolerance \(301s in the fut"):
        verify(SECRET, h, BODY, now=TS - 301)
    verify(SECRET, h, BODY, now=TS + 3000, tolerance_seconds=3600)
    with pytest.raises(SignatureError, match="timestamp outside the tolerance"):
        verify(SECRET, h, BODY, now=TS + 1, tolerance_seconds=0)


def test_stale_request_is_refused_even_when_correctly_signed() -> None:
    h = headers(by_hand(KEY, MSG_ID, TS, BODY))
    with pytest.raises(SignatureError, match="timestamp outside the tolerance"):
        verify(SECRET, h, BODY, now=TS + 86_400)


def test_negative_tolerance_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="tolerance_seconds"):
        verify(SECRET, headers(SPEC_SIGNATURE), BODY, now=TS, tolerance_seconds=-1)


@pytest.mark.parametrize("digits", [13, 309, 400, 5000])
def test_a_timestamp_too_long_for_any_clock_is_refused(digits: int) -> None:
    ts = "9" * digits
    with pytest.raises(SignatureError, match="webhook-timestamp is out of range"):
        verify(SECRET, headers(by_hand(KEY, MSG_ID, TS, BODY), ts=ts), BODY, now=TS)
