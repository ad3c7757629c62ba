"""API tokens: who may call hipq's API, with which scopes.

A token is configured as one line, ``NAME SCOPES [queue=Q,...] [type=T,...] [tenant=NAME]
[LIMIT...] SECRET``: ``SCOPES`` is a comma-separated list of submit, read, operate, callbacks,
workers, admin; a restricted token's jobs belong to its ``tenant`` (default: its name;
two lines of one tenant, during a rotation, share their jobs' keys);
each ``LIMIT`` bounds what the token's jobs may set (``notify=``, ``labels=``,
``priority=``, ``critical=``; see :class:`JobLimits`);
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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hipq.durations import parse_duration

SCOPES = ("submit", "read", "operate", "callbacks", "workers", "admin")
TOKEN_PREFIX = "hipq_"
ENV_VAR = "HIPQ_TOKENS"
_DIGEST_PREFIX = "sha256:"


class TokenConfigError(ValueError):
    """A token line that cannot be used; the message names the line, never its secret."""


# The job fields a token line may bound, as ``name=value``.
LIMIT_NAMES = (
    "notify",
    "labels",
    "priority",
    "critical",
    "weight",
    "timeout",
    "attempts",
    "retry_delay",
    "run_at",
)
# The bounds a restricted token's jobs take from their job type by default: weight,
# timeout and attempts at most the type's, a retry delay no shorter than the type's.
TYPE_BOUNDS = frozenset({"weight", "timeout", "attempts", "retry_delay"})


@dataclass(frozen=True)
class JobLimits:
    """What a token's jobs may set beyond their queue and type.

    A restricted token (``queue=`` or ``type=``) starts from the strict defaults
    (``RESTRICTED``): its jobs notify exactly their type's targets, carry no labels,
    are not critical, run no sooner than their type's priority, take no more capacity,
    time and attempts than their type gives and retry no sooner, and a ``run_at`` in
    the past is taken as now. Any other token starts unbounded (``OPEN``). A limit on
    the token's line replaces its default.
    """

    # Targets a job may add to its type's (which it may never drop); None: any.
    notify: frozenset[str] | None = None
    # Label name -> the values allowed (None: any value); None: any label.
    labels: Mapping[str, frozenset[str] | None] | None = None
    # Inclusive bounds of ``priority`` (lower runs first); None on a side: unbounded,
    # except that a restricted token's lowest is its job type's priority by default.
    priority_min: int | None = None
    priority_max: int | None = None
    # Whether a job may set ``critical: true`` (passing let_critical_through throttlers).
    critical: bool = True
    # The defaults of a restricted token: keeps its type's targets and priority floor.
    keep_type_targets: bool = False
    type_priority_floor: bool = False
    # Shared capacity and another system's patience: the most weight, timeout (seconds)
    # and attempts, and the shortest retry delay (seconds); None: unbounded, unless
    # named in ``type_bounds`` (then the job type's value is the bound).
    weight_max: int | None = None
    timeout_max: float | None = None
    attempts_max: int | None = None
    retry_delay_min: float | None = None
    type_bounds: frozenset[str] = frozenset()
    # Whether a ``run_at`` in the past stands (else it is taken as now: a job cannot
    # go before the jobs other tenants added earlier).
    past_run_at: bool = True


OPEN = JobLimits()
RESTRICTED = JobLimits(
    notify=frozenset(),
    labels={},
    critical=False,
    keep_type_targets=True,
    type_priority_floor=True,
    type_bounds=TYPE_BOUNDS,
    past_run_at=False,
)


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
    # What its jobs may set; None: the default for its kind (``job_limits``).
    limits: JobLimits | None = None
    # The tenant a restricted token acts for (``tenant=``); None: its own name.
    tenant_name: str | None = None

    def has(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    @property
    def restricted(self) -> bool:
        return self.queues is not None or self.types is not None

    @property
    def tenant(self) -> str:
        """The owner of the jobs it adds, within which the keys it names are looked up:
        a restricted token's tenant; '' (the service) for any other."""
        if not self.restricted:
            return ""
        return self.tenant_name or self.name

    @property
    def job_limits(self) -> JobLimits:
        if self.limits is not None:
            return self.limits
        return RESTRICTED if self.restricted else OPEN

    @property
    def owner(self) -> str | None:
        """The tenant whose objects (batches) it may name: its ``tenant``; None for an
        unrestricted token, which acts for the whole service."""
        return self.tenant or None

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
    limits: Iterable[str] = (),
    tenant: str | None = None,
) -> str:
    """The line that configures ``token`` (its digest, not the token); ``limits`` are
    ``name=value`` job limits as the line writes them (``priority=50..200``)."""
    parts = [name, ",".join(scopes)]
    if queues:
        parts.append("queue=" + ",".join(queues))
    if types:
        parts.append("type=" + ",".join(types))
    if tenant:
        parts.append("tenant=" + tenant)
    parts.extend(limits)
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

    def check_restrictions(
        self, queues: Iterable[str], types: Iterable[str], targets: Iterable[str] = ()
    ) -> None:
        """Refuse a restriction naming a queue, job type or notification target the config
        does not have (a typo would lock the tenant out, silently)."""
        known = {"queue": set(queues), "type": set(types), "notify": set(targets)}
        for entry in self._entries:
            p = entry.principal
            allowed = p.limits.notify if p.limits is not None else None
            for kind, names in (("queue", p.queues), ("type", p.types), ("notify", allowed)):
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
        raise TokenConfigError(
            f"{where}: expected 'NAME SCOPES [queue=..] [type=..] [limits..] SECRET'"
        )
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
    tenant: str | None = None
    job_limits: dict[str, str] = {}
    for limit in limits:
        key, sep, values = limit.partition("=")
        if sep and key in LIMIT_NAMES:
            job_limits[key] = values
            continue
        if sep and key == "tenant" and values:
            tenant = values
            continue
        names = frozenset(v for v in values.split(",") if v)
        if not sep or key not in ("queue", "type") or not names:
            raise TokenConfigError(
                f"{where}: token {name!r}: a restriction looks like queue=a,b or type=x,y, "
                f"tenant=NAME, or a job limit {', '.join(n + '=' for n in LIMIT_NAMES)}"
            )
        if key == "queue":
            queues = names
        else:
            types = names
    if tenant is not None and queues is None and types is None:
        # An unrestricted token acts for the service: it has no tenant to name.
        raise TokenConfigError(
            f"{where}: token {name!r}: tenant= needs a restriction (queue= or type=)"
        )
    parsed_limits = None
    if job_limits:
        base = RESTRICTED if queues is not None or types is not None else OPEN
        try:
            parsed_limits = _job_limits(base, job_limits)
        except ValueError as exc:
            raise TokenConfigError(f"{where}: token {name!r}: {exc}") from None
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
    principal = Principal(name, scopes, queues, types, limits=parsed_limits, tenant_name=tenant)
    return principal, hashed


def _job_limits(base: JobLimits, given: Mapping[str, str]) -> JobLimits:
    """``base`` with the limits of a token line (``notify=a,b``, ``labels=region,tier:gold``,
    ``priority=50..200``, ``critical=yes``) in place of its defaults."""
    limits = base
    if "notify" in given:
        # The type's own targets stay (a tenant must not silence them); these may be added.
        limits = replace(limits, notify=_names(given["notify"]), keep_type_targets=True)
    if "labels" in given:
        labels: dict[str, frozenset[str] | None] = {}
        for entry in _names(given["labels"]):
            label, sep, value = entry.partition(":")
            if not label:
                raise ValueError(f"labels=: {entry!r} is not NAME or NAME:VALUE")
            if not sep:
                labels[label] = None
            elif label not in labels or labels[label] is not None:
                labels[label] = (labels.get(label) or frozenset()) | {value}
        limits = replace(limits, labels=labels)
    if "priority" in given:
        low, sep, high = given["priority"].partition("..")
        try:
            bounds = (int(low) if low else None, int(high) if high else None)
        except ValueError:
            bounds = None
        if not sep or bounds is None or bounds == (None, None):
            raise ValueError("priority= takes MIN..MAX, MIN.. or ..MAX (integers)")
        low_bound, high_bound = bounds
        if low_bound is not None and high_bound is not None and low_bound > high_bound:
            raise ValueError("priority=: MIN is above MAX")
        limits = replace(
            limits, priority_min=low_bound, priority_max=high_bound, type_priority_floor=False
        )
    if "critical" in given:
        if given["critical"] not in ("yes", "no"):
            raise ValueError("critical= takes yes or no")
        limits = replace(limits, critical=given["critical"] == "yes")
    for name, field, parse in _BOUNDS:
        if name in given:
            most = None if given[name] == "any" else _bound(name, given[name], parse)
            bound: dict[str, Any] = {field: most}
            limits = replace(limits, **bound, type_bounds=limits.type_bounds - {name})
    if "run_at" in given:
        if given["run_at"] not in ("past", "now"):
            raise ValueError("run_at= takes past (a run_at in the past stands) or now")
        limits = replace(limits, past_run_at=given["run_at"] == "past")
    return limits


def _whole(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _duration(text: str) -> float:
    return parse_duration(text)


# The bounds a line sets as ``name=VALUE`` (or ``name=any``): its JobLimits field.
_BOUNDS = (
    ("weight", "weight_max", _whole),
    ("timeout", "timeout_max", _duration),
    ("attempts", "attempts_max", _whole),
    ("retry_delay", "retry_delay_min", _duration),
)


def _bound(name: str, text: str, parse: Callable[[str], float]) -> float:
    try:
        return parse(text)
    except ValueError:
        kind = "a whole number" if parse is _whole else "a duration such as 30s or 1h"
        raise ValueError(f"{name}= takes {kind}, or any") from None


def _names(values: str) -> frozenset[str]:
    """``a,b`` as a set; an empty value is the empty set (``notify=`` adds no target)."""
    return frozenset(v for v in values.split(",") if v)


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
