"""``hipq queues NAME --set KEY=VALUE``: a change of a queue's limits, from the command
line's words to the body of PATCH /v1/queues/{name}/limits."""

from __future__ import annotations

import json
from typing import Any

from hipq.commands.options import fail


def limits_change(items: list[str]) -> dict[str, Any]:
    """``concurrency=50``, ``throttlers.0.limit=5``, ``throttlers.2.per=10s``,
    ``throttlers.0.shares={"east": 50, "west": 50}``: values are JSON where they parse
    as JSON, else text (``10s``)."""
    change: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            fail(f"--set {item!r}: give KEY=VALUE, e.g. concurrency=50")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        parts = key.split(".")
        if parts == ["concurrency"]:
            change["concurrency"] = value
        elif len(parts) == 3 and parts[0] == "throttlers":
            change.setdefault("throttlers", {}).setdefault(parts[1], {})[parts[2]] = value
        else:
            fail(f"--set {key}: use concurrency or throttlers.INDEX.SETTING")
    return change
