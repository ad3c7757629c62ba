"""The one shape of a background activity of a hipq process.

A queue loop, the upkeep, the Kafka response consumer, the PostgreSQL listener and
the webhook's response writer each run beside the API. Each is an ``Activity``: the
service starts them in order and stops them in reverse, and a test drives one step
at a time through ``run_once`` without starting anything.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Activity(Protocol):
    name: str

    async def start(self) -> None:
        """Begin working in the background; return once it runs."""

    async def stop(self) -> None:
        """Finish the step under way (or cancel it after a grace period) and end."""

    async def run_once(self) -> Any:
        """One step, in the caller's task; what it did, for tests and benchmarks."""
