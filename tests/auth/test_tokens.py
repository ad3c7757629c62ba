"""Token lines, digests, the constant-time check and the serve-time exposure rule."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

import pytest

from hipq.security import tokens as tokens_module
from hipq.security.tokens import (
    ENV_VAR,
    TokenConfigError,
    Tokens,
    config_line,
    exposure_problem,
    load_tokens,
    new_token,
    parse_line,
)


def test_a_new_token_is_long_random_and_configured_by_its_digest() -> None:
    token = new_token()
    assert token.startswith("hipq_") and len(token) >= 40
    assert new_token() != token
    line = config_line("ci", ["submit", "read"], token)
    assert token not in line
    assert line == f"ci submit,read sha256:{hashlib.sha256(token.encode()).hexdigest()}"
    principal, digest = parse_line(line, "here")
    assert principal.name == "ci" and principal.scopes == {"submit", "read"}
    assert not principal.restricted
    assert Tokens([(principal, digest)]).check(token) == principal


def test_a_raw_token_line_is_hashed_at_load() -> None:
    token = new_token()
    loaded = load_tokens(None, {ENV_VAR: f"ops admin {token}"})
    principal = loaded.check(token)
    assert principal is not None and principal.has("operate") and principal.has("callbacks")
    assert loaded.check(token + "x") is None
    assert loaded.check("") is None


def test_env_and_file_together_several_valid_at_once(tmp_path: Path) -> None:
    old, new, filed = new_token(), new_token(), new_token()
    path = tmp_path / "tokens"
    path.write_text(f"# rotated monthly\n\n{config_line('filed', ['read'], filed)}\n")
    env = {ENV_VAR: f"{config_line('old', ['submit'], old)};{config_line('new', ['submit'], new)}"}
    loaded = load_tokens(str(path), env)
    assert loaded.names == ["old", "new", "filed"]
    assert [loaded.check(t).name for t in (old, new, filed)] == ["old", "new", "filed"]  # type: ignore[union-attr]


def test_restrictions() -> None:
    line = config_line("acme", ["submit"], new_token(), queues=["acme", "acme-bulk"], types=["x"])
    principal, _ = parse_line(line, "here")
    assert principal.queues == {"acme", "acme-bulk"} and principal.types == {"x"}
    assert principal.restricted


def test_a_restriction_must_name_a_configured_queue_or_type() -> None:
    line = config_line("acme", ["submit"], new_token(), queues=["acme"], types=["charge"])
    loaded = load_tokens(None, {ENV_VAR: line})
    loaded.check_restrictions(["acme", "default"], ["charge"])
    with pytest.raises(TokenConfigError, match="token 'acme': unknown queue 'acme' in its"):
        loaded.check_restrictions(["default"], ["charge"])
    with pytest.raises(TokenConfigError, match="token 'acme': unknown type 'charge' in its"):
        loaded.check_restrictions(["acme"], ["refund"])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("ci", "here: expected 'NAME SCOPES [queue=..] [type=..] [limits..] SECRET'"),
        ("ci read,delete hipq_0123456789abcdefghij", "here: token 'ci': unknown scope 'delete'"),
        ("ci , hipq_0123456789abcdefghij", "here: token 'ci': unknown scope '(none)'"),
        (
            "ci read tenant=a hipq_0123456789abcdefghij",
            "here: token 'ci': tenant= needs a restriction (queue= or type=)",
        ),
        (
            "ci read colour=a hipq_0123456789abcdefghij",
            "here: token 'ci': a restriction looks like queue=a,b",
        ),
        (
            "ci read queue= hipq_0123456789abcdefghij",
            "here: token 'ci': a restriction looks like queue=a,b",
        ),
        ("ci read sha256:abcd", "here: token 'ci': sha256: needs 64 hex digits"),
        ("ci read short-secret", "here: token 'ci': too short"),
    ],
)
def test_bad_lines_name_the_problem_never_the_secret(line: str, message: str) -> None:
    with pytest.raises(TokenConfigError) as caught:
        parse_line(line, "here")
    assert str(caught.value).startswith(message)
    secret = line.split()[-1]
    if len(line.split()) >= 3:
        assert secret not in str(caught.value)


def test_a_name_configured_twice_and_an_unreadable_file(tmp_path: Path) -> None:
    a, b = config_line("ci", ["read"], new_token()), config_line("ci", ["submit"], new_token())
    with pytest.raises(TokenConfigError, match="token name 'ci' is configured twice"):
        load_tokens(None, {ENV_VAR: f"{a}\n{b}"})
    with pytest.raises(TokenConfigError, match=r"auth.tokens_file: cannot read .*missing"):
        load_tokens(str(tmp_path / "missing"), {})
    with pytest.raises(TokenConfigError, match=r"HIPQ_TOKENS entry 2: token 'x'"):
        load_tokens(None, {ENV_VAR: f"{a};x read short"})


def test_check_compares_every_digest_whichever_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    # Timing-safe: each configured digest is compared with hmac.compare_digest, also
    # after a match and for a token that matches none, so the time taken does not
    # tell whether, or which, a token matched. (Counted, not timed: no clock in tests.)
    secrets = [new_token() for _ in range(5)]
    loaded = Tokens(
        parse_line(config_line(f"t{i}", ["read"], s), "x") for i, s in enumerate(secrets)
    )
    compared: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return original(a, b)

    monkeypatch.setattr(tokens_module.hmac, "compare_digest", counting)
    for presented, name in ((secrets[0], "t0"), (secrets[4], "t4"), ("hipq_wrong", None)):
        compared.clear()
        found = loaded.check(presented)
        assert (found.name if found else None) == name
        assert len(compared) == 5
        # Digests of equal length are compared, never the presented token itself.
        assert all(len(a) == len(b) == 32 for a, b in compared)


@pytest.mark.parametrize(
    ("host", "configured", "gateway", "refused"),
    [
        ("127.0.0.1", False, False, False),
        ("::1", False, False, False),
        ("localhost", False, False, False),
        ("127.0.0.2", False, False, False),
        ("0.0.0.0", False, False, True),
        ("::", False, False, True),
        ("10.1.2.3", False, False, True),
        ("hipq.internal", False, False, True),
        ("0.0.0.0", True, False, False),
        ("0.0.0.0", False, True, False),
    ],
)
def test_serving_beyond_loopback_needs_tokens_or_a_gateway(
    host: str, configured: bool, gateway: bool, refused: bool
) -> None:
    tokens = load_tokens(None, {ENV_VAR: f"ops admin {new_token()}"} if configured else {})
    problem = exposure_problem(host, tokens, gateway)
    assert (problem is not None) == refused
    if problem:
        assert "\n" not in problem and "hipq tokens new" in problem
        assert "auth.behind_gateway" in problem
