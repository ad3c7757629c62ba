"""Finding and building plugins (throttlers, retry strategies) through entry points.

Built-ins register through the same groups as a user's package does, so there is
one path for both. A plugin class may declare ``config_model`` (a pydantic model)
to have its settings validated at start; otherwise it receives the raw mapping.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

THROTTLERS = "hipq.throttlers"
RETRY_STRATEGIES = "hipq.retry_strategies"

_KIND = {THROTTLERS: "throttler", RETRY_STRATEGIES: "retry strategy"}


class PluginError(ValueError):
    """A plugin that is unknown, fails to import, or refuses its settings."""


@cache
def installed(group: str) -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=group)}


def load_class(group: str, name: str) -> type:
    eps = installed(group)
    if name not in eps:
        names = ", ".join(sorted(eps)) or "none"
        raise PluginError(f"unknown {_KIND[group]} {name!r}; installed: {names}")
    try:
        return eps[name].load()
    except Exception as exc:  # an import error in a user's plugin must name the plugin
        raise PluginError(f"{_KIND[group]} {name!r} failed to load: {exc}") from exc


def validate_settings(cls: type, settings: dict[str, Any]) -> Any:
    """The validated settings object a plugin's constructor receives."""
    model: type[BaseModel] | None = getattr(cls, "config_model", None)
    if model is None:
        return dict(settings)
    try:
        return model.model_validate(settings)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise PluginError(f"{where}: {err['msg']}" if where else err["msg"]) from None


def build(group: str, name: str, settings: dict[str, Any]) -> Any:
    cls = load_class(group, name)
    return cls(validate_settings(cls, settings))


class RetryStrategies:
    """Strategy instances, one per distinct retry config (jobs carry their config as JSON)."""

    def __init__(self) -> None:
        self._cache: dict[bytes, Any] = {}

    def get(self, config: dict[str, Any]) -> Any:
        key = orjson.dumps(config, option=orjson.OPT_SORT_KEYS, default=str)
        strategy = self._cache.get(key)
        if strategy is None:
            name = config.get("strategy", "exponential")
            strategy = build(RETRY_STRATEGIES, name, {**config, "strategy": name})
            if len(self._cache) > 10_000:  # jobs may carry arbitrary configs; stay bounded
                self._cache.clear()
            self._cache[key] = strategy
        return strategy

    def validate(self, config: dict[str, Any]) -> None:
        self.get(config)
