"""API tokens: who may call hipq's API, with which scopes.

A token is configured as one line, ``NAME SCOPES [queue=Q,...] [type=T,...] SECRET``:
``SCOPES`` is a comma-separated list of submit, read, operate, callbacks, admin;
``SECRET`` is the token itself or its ``sha256:<hex>`` digest (what ``hipq tokens new``
prints). Lines come from the ``HIPQ_TOKENS`` variable (separated by newlines or ``;``)
and from the file at ``auth.tokens_file`` (one a line, ``#`` comments), never from the
YAML file: a config file is shared and committed, a secret is not.

Only digests are kept in memory. SHA-256 suffices here, where a password store would
need bcrypt or argon2: a token is 256 random bits, so there is no dictionary to try and
no speed-up a slow hash could take away, while a slow hash would cost every request
milliseconds of CPU.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

SCOPES = ("submit", "read", "operate", "callbacks", "admin")
TOKEN_PREFIX = "hipq_"
ENV_VAR = "HIPQ_TOKENS"
_DIGEST_PREFIX = "sha256:"


class TokenConfigError(ValueError):
    """A token line that cannot be used; the message names the line, never its secret."""


@dataclass(frozen=True)
class Principal:
    """Who made a request: a token's name, scopes and restrictions."""

    name: str
    scopes: frozenset[str]
    # None: any queue (or job type); otherwise only these.
    queues: frozenset[str] | None = None
    types: frozenset[str] | None = None
    # False for the anonymous caller of a hipq that has no tokens (open on loopback).
    authenticated: bool = True

    def has(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    @property
    def restricted(self) -> bool:
        return self.queues is not None or self.types is not None

    @property
    def reads_all(self) -> bool:
        """May see what spans every tenant: the job types, the host's name."""
        return self.has("read") and not self.restricted


# The caller of a hipq without tokens: everything is allowed, as before tokens existed.
ANONYMOUS = Principal("anonymous", frozenset(SCOPES), authenticated=False)


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def new_token() -> str:
    """A fresh token: 256 random bits, prefixed so a leaked one is recognisable."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def config_line(
    name: str,
    scopes: Iterable[str],
    token: str,
    queues: Iterable[str] = (),
    types: Iterable[str] = (),
) -> str:
    """The line that configures ``token`` (its digest, not the token)."""
    parts = [name, ",".join(scopes)]
    if queues:
        parts.append("queue=" + ",".join(queues))
    if types:
        parts.append("type=" + ",".join(types))
    parts.append(_DIGEST_PREFIX + digest(token).hex())
    return " ".join(parts)


@dataclass(frozen=True)
class _Entry:
    principal: Principal
    digest: bytes


class Tokens:
    """The configured tokens, by digest; ``check`` compares in constant time."""

    def __init__(self, entries: Iterable[tuple[Principal, bytes]] = ()) -> None:
        self._entries = [_Entry(p, d) for p, d in entries]
        names = [e.principal.name for e in self._entries]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise TokenConfigError(f"token name {duplicated[0]!r} is configured twice")

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def names(self) -> list[str]:
        return [e.principal.name for e in self._entries]

    def check_restrictions(self, queues: Iterable[str], types: Iterable[str]) -> None:
        """Refuse a restriction naming a queue or job type the config does not have
        (a typo would lock the tenant out, silently)."""
        known = {"queue": set(queues), "type": set(types)}
        for entry in self._entries:
            p = entry.principal
            for kind, names in (("queue", p.queues), ("type", p.types)):
                unknown = sorted((names or set()) - known[kind])
                if unknown:
                    raise TokenConfigError(
                        f"token {p.name!r}: unknown {kind} {unknown[0]!r} in its restriction"
                    )

    def check(self, presented: str) -> Principal | None:
        """The principal of ``presented``, or None. Every configured digest is compared,
        each with ``hmac.compare_digest``, whichever matches: the time taken tells
        neither whether nor which one matched."""
        seen = digest(presented)
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(entry.digest, seen):
                found = entry.principal
        return found


def parse_line(line: str, where: str) -> tuple[Principal, bytes]:
    """One token line; errors name ``where`` (a file and line number, or the variable)."""
    fields = line.split()
    if len(fields) < 3:
        raise TokenConfigError(f"{where}: expected 'NAME SCOPES [queue=..] [type=..] SECRET'")
    name, scope_list, *limits, secret = fields
    scopes = frozenset(s for s in scope_list.split(",") if s)
    unknown = sorted(scopes - set(SCOPES))
    if not scopes or unknown:
        raise TokenConfigError(
            f"{where}: token {name!r}: unknown scope {unknown[0] if unknown else '(none)'!r}"
            f" (scopes: {', '.join(SCOPES)})"
        )
    queues: frozenset[str] | None = None
    types: frozenset[str] | None = None
    for limit in limits:
        key, sep, values = limit.partition("=")
        names = frozenset(v for v in values.split(",") if v)
        if not sep or key not in ("queue", "type") or not names:
            raise TokenConfigError(
                f"{where}: token {name!r}: a restriction looks like queue=a,b or type=x,y"
            )
        if key == "queue":
            queues = names
        else:
            types = names
    if secret.startswith(_DIGEST_PREFIX):
        try:
            hashed = bytes.fromhex(secret.removeprefix(_DIGEST_PREFIX))
        except ValueError:
            hashed = b""
        if len(hashed) != hashlib.sha256().digest_size:
            raise TokenConfigError(f"{where}: token {name!r}: sha256: needs 64 hex digits")
    else:
        if len(secret) < 20:
            raise TokenConfigError(
                f"{where}: token {name!r}: too short (use `hipq tokens new` for one)"
            )
        hashed = digest(secret)
    return Principal(name, scopes, queues, types), hashed


def load_tokens(tokens_file: str | None, environ: Mapping[str, str] | None = None) -> Tokens:
    """The tokens of ``HIPQ_TOKENS`` and of ``tokens_file`` together (several may be
    valid at once: add the new token, move clients over, remove the old one)."""
    environ = os.environ if environ is None else environ
    entries = []
    raw = environ.get(ENV_VAR, "")
    for i, line in enumerate(raw.replace(";", "\n").splitlines()):
        if line.strip() and not line.strip().startswith("#"):
            entries.append(parse_line(line, f"{ENV_VAR} entry {i + 1}"))
    if tokens_file:
        try:
            text = Path(tokens_file).read_text()
        except OSError as exc:
            raise TokenConfigError(
                f"auth.tokens_file: cannot read {tokens_file}: {exc.strerror}"
            ) from None
        for i, line in enumerate(text.splitlines()):
            if line.strip() and not line.strip().startswith("#"):
                entries.append(parse_line(line, f"{tokens_file}:{i + 1}"))
    return Tokens(entries)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve beyond this machine


def exposure_problem(host: str, tokens: Tokens, behind_gateway: bool) -> str | None:
    """Why ``hipq serve`` must not listen on ``host`` as configured, or None: beyond
    loopback, an API without tokens would be open to the network."""
    if tokens or behind_gateway or _loopback(host):
        return None
    return (
        f"refusing to listen on {host} without tokens: add one (`hipq tokens new --name NAME "
        f"--scope admin`, then HIPQ_TOKENS or auth.tokens_file), or set auth.behind_gateway: "
        f"true if an authenticating gateway sits in front"
    )
