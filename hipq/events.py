"""Named events the core emits; logging and metrics subscribe instead of being sprinkled around."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("hipq.events")

Subscriber = Callable[[str, dict[str, Any]], None]


class Events:
    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def emit(self, name: str, **fields: Any) -> None:
        for subscriber in self._subscribers:
            try:
                subscriber(name, fields)
            except Exception:  # an observer must never break the loop it observes
                log.exception("event subscriber failed on %s", name)
