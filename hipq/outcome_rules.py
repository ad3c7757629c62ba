"""Outcome rules: decide whether a response means the job succeeded.

A job type or a Kafka response source says which part of the response carries
the outcome and which values mean success::

    outcome: {field: status, success: [ok, approved]}      # a JSON field, may be dotted
    outcome: {field: result.status, success: [ok]}
    outcome: {header: x-outcome, success: [ok]}             # a response header
    outcome: {field: null, success: []}                     # every response is a success
    outcome: {field: null}                                  # the same

Without an ``outcome`` key the rule is ``{field: status, success: [ok]}``.

How values compare:

* a string in ``success`` matches only a JSON string with exactly the same
  characters (case-sensitive, no coercion: ``"200"`` does not match ``200``);
* a number or boolean in ``success`` matches the JSON-equal value: ``1`` matches
  ``1`` and ``1.0`` but neither ``"1"`` nor ``true``;
* a header is always text, so it is compared with the config value written as
  JSON writes it (``true``, ``200``, ``ok``).

YAML turns unquoted ``yes``, ``no``, ``on``, ``off``, ``true`` and ``false`` into
booleans; quote them (``success: ["yes"]``) when the response sends them as strings.

The accept-everything rule (``field: null``, ``success: []``) is meant for
systems whose response carries no outcome: that it arrived is the success. A
rule that names a field must list at least one success value, and a rule that
lists success values must name a field or a header, because either half alone
is almost certainly a config mistake.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

__all__ = ["Judgement", "OutcomeRule", "OutcomeRuleError", "decide"]

Scalar = str | int | float | bool

_NO_HEADERS: Mapping[str, str] = MappingProxyType({})
_MAX_SHOWN = 80  # reasons are shown in lists and logs; keep them one short line


class OutcomeRuleError(ValueError):
    """An outcome rule in the config that cannot work."""


@dataclass(frozen=True, slots=True)
class Judgement:
    """What an outcome rule made of one response (not a job's ``outcomes.Outcome``)."""

    succeeded: bool
    reason: str


@dataclass(frozen=True, slots=True)
class OutcomeRule:
    field: str | None = "status"
    success: tuple[Scalar, ...] = ("ok",)
    header: str | None = None

    def __post_init__(self) -> None:
        # Accept a list (as a caller building a rule by hand would pass) but
        # store a tuple so the rule stays hashable and immutable.
        success = self.success
        if isinstance(success, str | int | float | bool):
            success = (success,)
        if not isinstance(success, Sequence):
            raise OutcomeRuleError("outcome success must be a list of values")
        object.__setattr__(self, "success", tuple(success))
        for value in self.success:
            if not isinstance(value, str | int | float | bool):
                raise OutcomeRuleError(
                    f"outcome success values must be strings, numbers or booleans,"
                    f" not {_shown(value)}"
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise OutcomeRuleError(f"outcome success value {value} is not a JSON number")

        if self.field is not None and self.header is not None:
            raise OutcomeRuleError("an outcome rule names a field or a header, not both")
        if self.field is not None:
            if not isinstance(self.field, str) or not all(self.field.split(".")):
                raise OutcomeRuleError(f"outcome field {self.field!r} is not a dotted name")
        if self.header is not None and (not isinstance(self.header, str) or not self.header):
            raise OutcomeRuleError(f"outcome header {self.header!r} is not a header name")
        if (self.field is None and self.header is None) != (not self.success):
            if self.success:
                raise OutcomeRuleError(
                    "outcome success values need a field or a header to compare with"
                    " (for 'every response succeeds' write field: null, success: [])"
                )
            raise OutcomeRuleError(
                "outcome success must list at least one value, or nothing could succeed"
            )

    @property
    def accepts_any(self) -> bool:
        """True for ``{field: null, success: []}``: every response is a success."""
        return self.field is None and self.header is None

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> OutcomeRule:
        """Build a rule from the ``outcome`` mapping of the config (None: the default rule)."""
        if config is None:
            return cls()
        if not isinstance(config, Mapping):
            raise OutcomeRuleError(
                f"outcome must be a mapping such as {{field: status, success: [ok]}},"
                f" not {_shown(config)}"
            )
        unknown = sorted(set(config) - {"field", "header", "success"})
        if unknown:
            raise OutcomeRuleError(
                f"unknown outcome key {unknown[0]!r} (expected field, header, success)"
            )
        # Naming a header means "not the default field": {header: x-outcome}
        # must not also look for a body field called status.
        default_field = None if "header" in config else "status"
        field = config.get("field", default_field)
        header = config.get("header")
        # {field: null} alone already says "no outcome field": accept every
        # response rather than demand the success: [] that would follow.
        default_success: tuple[Scalar, ...] = () if field is None and header is None else ("ok",)
        success = config.get("success", default_success)
        if success is None:
            success = ()
        if not isinstance(success, str | int | float | bool | list | tuple):
            raise OutcomeRuleError(
                f"outcome success must be a list of values, not {_shown(success)}"
            )
        return cls(
            field=field,
            success=success,  # type: ignore[arg-type]  # normalised in __post_init__
            header=header,
        )


# No outcome configured where a response is the answer (callbacks, Kafka responses,
# synchronous HTTP): every response is a success.
ANY_RESPONSE = OutcomeRule(field=None, success=())


def rule_for(config: Mapping[str, Any] | None) -> OutcomeRule:
    """The rule of an ``outcome`` setting; none configured: ``ANY_RESPONSE``."""
    return ANY_RESPONSE if config is None else OutcomeRule.from_config(config)


def parse_body(raw: bytes) -> Any:
    """A response body as JSON, or as text if it is not JSON (None when empty)."""
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", errors="replace")


def decide(rule: OutcomeRule, body: Any, headers: Mapping[str, str] = _NO_HEADERS) -> Judgement:
    """Apply ``rule`` to a response.

    ``body`` is the parsed JSON body; raw ``bytes`` or ``str`` are parsed here, so a
    Kafka message value or an HTTP body can be passed as received. ``headers``
    may hold ``bytes`` values (Kafka); header names are matched case-insensitively.
    """
    if rule.accepts_any:
        return Judgement(True, "any response counts as success")
    if rule.header is not None:
        raw = _header(headers, rule.header)
        if raw is None:
            return Judgement(False, f"header {rule.header} missing")
        matched = any(raw == _as_text(v) for v in rule.success)
        shown = f"header {rule.header}={_shown(raw)}"
    else:
        assert rule.field is not None
        found, value = _field(rule.field, body)
        if not found:
            return Judgement(False, f"field {rule.field} missing{value}")
        matched = any(_json_equal(value, v) for v in rule.success)
        shown = f"{rule.field}={_shown(value)}"
    if matched:
        return Judgement(True, shown)
    choices = ", ".join(_as_text(v) for v in rule.success)
    return Judgement(False, f"{shown} is not one of {choices}")


def _field(path: str, body: Any) -> tuple[bool, Any]:
    """Return (True, value) or (False, detail for the reason)."""
    if isinstance(body, bytes | bytearray | memoryview | str):
        if not body:
            return False, " (empty body)"
        try:
            body = json.loads(bytes(body) if not isinstance(body, str) else body)
        except ValueError:
            return False, " (body is not JSON)"
    if body is None:
        return False, " (empty body)"
    current = body
    for segment in path.split("."):
        if isinstance(current, Mapping):
            if segment not in current:
                return False, ""
            current = current[segment]
        elif isinstance(current, list | tuple) and segment.isascii() and segment.isdigit():
            index = int(segment)
            if index >= len(current):
                return False, ""
            current = current[index]
        else:
            return False, "" if current is not body else " (body is not a JSON object)"
    return True, current


def _json_equal(actual: Any, expected: Scalar) -> bool:
    # bool is an int subclass in Python, but true and 1 are different JSON values.
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual is expected
    if isinstance(expected, str):
        return isinstance(actual, str) and actual == expected
    return isinstance(actual, int | float) and actual == expected


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        # HTTP header names are case-insensitive; a plain dict is not.
        lowered = name.lower()
        for key, candidate in headers.items():
            if isinstance(key, str) and key.lower() == lowered:
                value = candidate
                break
    if value is None:
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _as_text(value: Scalar) -> str:
    """A config value written the way a header (or a person reading JSON) would."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = json.dumps(value, separators=(",", ":"), sort_keys=True)
        except (TypeError, ValueError):
            text = type(value).__name__
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 3] + "..."
    return text
