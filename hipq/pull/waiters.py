"""Fetches that wait for jobs (``POST /v1/workers/fetch`` with ``wait``).

A fetch takes what it can at once; with nothing to take it waits until a job of one
of its types is claimed (a ``pull:<type>`` wake-up: this process's loops announce
their claims in process, other processes' arrive by NOTIFY on PostgreSQL), at most
``RECHECK_SECONDS`` at a time (a net under a wake-up lost while the LISTEN
connection reconnected), until its ``wait`` is over. A wake-up wakes every fetch of
that type; those that find nothing taken for them wait again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

# The longest a fetch may wait; longer is refused (422).
MAX_WAIT_SECONDS = 60.0
RECHECK_SECONDS = 2.0

T = TypeVar("T")


class FetchWaiters:
    def __init__(self, recheck_seconds: float = RECHECK_SECONDS) -> None:
        self.recheck_seconds = recheck_seconds
        self._waiting: dict[asyncio.Event, frozenset[str]] = {}
        self._closed = False

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def on_pulled(self, job_type: str) -> None:
        """Jobs of ``job_type`` were claimed: wake the fetches that take that type."""
        for event, types in self._waiting.items():
            if job_type in types:
                event.set()

    def release_all(self) -> None:
        """The process stops: every waiting fetch answers now with what it has."""
        self._closed = True
        for event in self._waiting:
            event.set()

    def reopen(self) -> None:
        self._closed = False

    async def take(
        self,
        types: Sequence[str],
        wait_seconds: float,
        attempt: Callable[[], Awaitable[list[T]]],
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> list[T]:
        """``attempt()``'s first non-empty answer within ``wait_seconds``, else []; a
        caller that is ``gone`` (its client disconnected) takes nothing more."""
        event = asyncio.Event()
        # Registered before the first try: a claim announced meanwhile wakes it.
        self._waiting[event] = frozenset(types)
        end = time.monotonic() + wait_seconds
        try:
            while True:
                event.clear()
                if gone is not None and await gone():
                    return []
                taken = await attempt()
                left = end - time.monotonic()
                if taken or left <= 0 or self._closed:
                    return taken
                try:
                    await asyncio.wait_for(event.wait(), min(left, self.recheck_seconds))
                except TimeoutError:
                    pass
        finally:
            del self._waiting[event]
