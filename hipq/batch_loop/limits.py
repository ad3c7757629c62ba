"""Limits changed at run time: an operator's overrides of a queue's configured limits.

The overrides are persisted on the queue's row (``hipq_queues.limits``) as
``{"concurrency": N, "throttlers": {"<index>": {setting: value}}}``, where the index
is the throttler's place in the queue's configured ``throttlers`` list. A change is
checked by building the chain exactly as start-up does (``build_stages``), and the
queue's owner rebuilds its chain from the same function when it reads a change.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from pydantic import ValidationError

from hipq.batch_loop.chain import ChainConfigError, build_stages
from hipq.config import QueueConfig, Settings
from hipq.throttling import Stage

log = logging.getLogger("hipq.limits")

# The settings of each built-in throttler that an operator may change at run time:
# its limits. The rest (labels, keys, lending, windows) shapes the chain and stays
# with the config.
ADJUSTABLE: dict[str, frozenset[str]] = {
    "concurrency": frozenset({"limit"}),
    "share": frozenset({"shares", "other"}),
    "per_key": frozenset({"limit"}),
    "rate": frozenset({"limit", "per"}),
}


# A throttler's index as stored: ASCII digits without leading zeros, so that one
# throttler has one key ("1" and "01" would be two overrides of which either may win).
_INDEX = re.compile(r"0|[1-9][0-9]{0,5}")


def canonical_index(index: object) -> str | None:
    """``index`` as stored, or None when it is not written canonically."""
    text = str(index)
    return text if _INDEX.fullmatch(text) else None


def _as_stored(index: str) -> str:
    try:
        return str(int(index)) if index.isdecimal() else index
    except ValueError:
        return index


class LimitsError(ValueError):
    """A change that the chain would refuse; ``field`` names where (API: a 422)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def merged(current: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """``current`` overrides with ``change`` applied: each setting given replaces the
    one before (a share's ``shares`` as a whole)."""
    before = current.get("throttlers", {})
    out: dict[str, Any] = {"throttlers": {}}
    for index, settings in before.items():
        # Stored by an older hipq as "01" or "٣": merged into the one index it meant.
        out["throttlers"].setdefault(_as_stored(str(index)), {}).update(settings)
    if "concurrency" in current:
        out["concurrency"] = current["concurrency"]
    if "concurrency" in change:
        out["concurrency"] = change["concurrency"]
    for index, settings in (change.get("throttlers") or {}).items():
        if settings:
            out["throttlers"].setdefault(str(index), {}).update(settings)
    if not out["throttlers"]:
        del out["throttlers"]
    return out


def limits_in_force(config: QueueConfig) -> list[dict[str, dict[str, Any]]]:
    """Each configured throttler with only its adjustable settings: the limits, and
    nothing else of a plugin's settings (which may hold what a reader should not see)."""
    shown = []
    for item in config.throttlers:
        ((kind, raw),) = item.items()
        allowed = ADJUSTABLE.get(kind, frozenset())
        shown.append({kind: {k: v for k, v in (raw or {}).items() if k in allowed}})
    return shown


def queue_with(config: QueueConfig, overrides: dict[str, Any]) -> QueueConfig:
    """The queue's config with ``overrides`` applied, validated as the config file is."""
    items = [dict(item) for item in config.throttlers]
    for index, settings in (overrides.get("throttlers") or {}).items():
        where = f"throttlers.{index}"
        if canonical_index(index) is None:
            raise LimitsError(
                where, "a throttler's index is its place in ASCII digits without leading zeros"
            )
        if int(index) >= len(items):
            raise LimitsError(where, f"the queue has no throttler {index} (it has {len(items)})")
        ((kind, raw),) = items[int(index)].items()
        allowed = ADJUSTABLE.get(kind, frozenset())
        for name in settings:
            if name not in allowed:
                can = ", ".join(sorted(allowed)) or "none"
                raise LimitsError(
                    f"{where}.{name}", f"{kind} has no setting {name!r} to change (it has: {can})"
                )
        items[int(index)] = {kind: {**(raw or {}), **settings}}
    data = config.model_dump()
    data["throttlers"] = items
    if "concurrency" in overrides:
        data["concurrency"] = overrides["concurrency"]
    try:
        return QueueConfig.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "limits"
        raise LimitsError(where, error["msg"]) from None


def stages_with(
    name: str, settings: Settings, overrides: dict[str, Any]
) -> tuple[QueueConfig, list[Stage]]:
    """The queue's config and chain with ``overrides``, built as start-up builds them."""
    config = queue_with(settings.queues[name], overrides)
    changed = settings.model_copy(update={"queues": {**settings.queues, name: config}})
    try:
        return config, build_stages(name, changed)
    except ChainConfigError as exc:
        raise _limits_error(str(exc), overrides) from None


_CHAIN_ERROR = re.compile(r"throttlers\[(\d+)\]\.[\w.-]+: (.*)$", re.DOTALL)


def _limits_error(text: str, overrides: dict[str, Any]) -> LimitsError:
    """``throttlers.<i>.<setting>`` for a throttler that refused its changed settings;
    ``concurrency`` when only the capacity changed (a share's quotas come from it)."""
    found = _CHAIN_ERROR.search(text)
    if found is None:
        return LimitsError("limits", text)
    index, message = found.groups()
    changed = list((overrides.get("throttlers") or {}).get(index, {}))
    if len(changed) == 1:
        return LimitsError(f"throttlers.{index}.{changed[0]}", message)
    if not changed and "concurrency" in overrides:
        return LimitsError("concurrency", f"throttler {index}: {message}")
    return LimitsError(f"throttlers.{index}", message)


class LiveLimits:
    """What a queue's owner holds of the overrides: the last ones it applied."""

    def __init__(self, name: str, settings: Settings) -> None:
        self.name, self.settings = name, settings
        self.applied: dict[str, Any] = {}
        self._refused: dict[str, Any] | None = None  # logged once, not at every read

    def take(self, overrides: dict[str, Any]) -> tuple[QueueConfig, list[Stage]] | None:
        """The queue's new config and chain when ``overrides`` (as read; {}: the config's
        values) differ from those applied; None otherwise, or when they no longer fit
        the config (logged: the config's limits stay, e.g. after a throttler was removed)."""
        if overrides == self.applied or overrides == self._refused:
            return None
        try:
            built = stages_with(self.name, self.settings, overrides)
        except LimitsError as exc:
            self._refused = overrides
            log.error("queue %s: changed limits ignored, %s: %s", self.name, exc.field, exc)
            return None
        self.applied, self._refused = overrides, None
        return built
