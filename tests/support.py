"""Helpers shared by the tests: a pinned clock (the one hipq.testing gives users),
settings, waiting for a condition, a reporter that records what a transport said."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from hipq.config import Settings, load_settings
from hipq.jobs import Job
from hipq.outcomes import Failed, Outcome
from hipq.testing import FakeClock as FakeClock  # re-exported for the tests


def make_settings(database_url: str, **overrides: Any) -> Settings:
    """Settings with a python job type per handler of tests/handlers.py."""
    job_types = {
        name: {
            "transport": {"python": {"handler": f"tests.handlers:{name}"}},
            "retry": {"strategy": "fixed", "delay": "10s", "max_attempts": 3},
        }
        for name in ("ok", "fail", "hang", "record", "permanent", "checkpointing")
    }
    job_types.update(overrides.pop("job_types", {}))
    base: dict[str, Any] = {
        "database_url": database_url,
        "migrate_on_start": True,
        "queues": {"default": {}},
        "job_types": job_types,
    }
    base.update(overrides)
    return load_settings(None, **base)


async def eventually(
    check: Callable[[], Awaitable[Any]] | Callable[[], Any],
    timeout: float = 60.0,  # noqa: ASYNC109 - a polling helper's bound, not a call's
    interval: float = 0.02,
) -> Any:
    """Wait until ``check()`` returns something truthy (or raise with its last value)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")


async def settle_ticks(loop: Any, ticks: int = 5, pause: float = 0.01) -> None:
    """Run a loop's ticks, yielding between them so python handlers can finish."""
    for _ in range(ticks):
        await loop.run_once()
        await asyncio.sleep(pause)


class Recorder:
    """A Reporter that keeps what a transport said."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Job, Outcome | None]] = []

    def outcome(self, job: Job, outcome: Outcome) -> None:
        self.calls.append(("outcome", job, outcome))

    def sent(self, job: Job) -> None:
        self.calls.append(("sent", job, None))

    def heartbeat(self, job: Job, deadline: datetime) -> None:
        raise AssertionError("unexpected heartbeat")

    def checkpoint(self, job: Job, payload: dict[str, Any]) -> None:
        raise AssertionError("unexpected checkpoint")

    async def one(self) -> tuple[str, Outcome | None]:
        """The one report of the send (waits for it, then a moment for a second one)."""
        await eventually(lambda: self.calls, timeout=60)
        await asyncio.sleep(0.05)  # a second report would show up here
        assert len(self.calls) == 1, self.calls
        kind, _job, outcome = self.calls[0]
        return kind, outcome

    async def failure(self) -> Failed:
        kind, outcome = await self.one()
        assert kind == "outcome" and isinstance(outcome, Failed), (kind, outcome)
        return outcome
