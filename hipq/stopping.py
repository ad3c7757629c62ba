"""Stopping a process: work in flight drained within a grace, background tasks ended
without cutting a transaction in half."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection

log = logging.getLogger("hipq.process.stopping")

# How long a task asked to stop may take to finish what it is doing.
GRACE_SECONDS = 5.0
# How often a drain looks whether the work in flight has ended.
DRAIN_POLL_SECONDS = 0.05
# How often, at most, a drain says how much is still in flight (at least every second).
PROGRESS_MAX_SECONDS = 5.0


async def finish_or_cancel(
    tasks: Collection[asyncio.Task[None]], grace: float = GRACE_SECONDS
) -> None:
    """Wait up to ``grace`` seconds for ``tasks`` (already asked to stop) to end on
    their own, then cancel the rest.

    A task cancelled in the middle of a database transaction can leave its
    connection holding locks until the connection is collected: on SQLite, the
    write lock, which then stalls every later write (the shutdown's own lease
    release among them) for the busy timeout. A task that ends on its own commits
    or rolls back first.
    """
    if not tasks:
        return
    _done, pending = await asyncio.wait(tasks, timeout=grace)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def drain(in_flight: Callable[[], int], deadline: float, hurry: Callable[[], bool]) -> int:
    """Wait until nothing is ``in_flight``, the monotonic ``deadline`` passes or
    ``hurry()`` says to stop at once; what is still in flight then.

    Polled rather than signalled: the work is spread over every transport and loop,
    and a stop waits at most a few polls longer than its work.
    """
    left = in_flight()
    if left:
        waiting = max(0.0, deadline - time.monotonic())
        log.warning(
            "stopping: claiming nothing more; waiting up to %.1fs for %d jobs in flight",
            waiting,
            left,
        )
        # A line every few seconds while it waits: a quiet log would look like a hang.
        every = min(PROGRESS_MAX_SECONDS, max(1.0, waiting / 5))
        next_progress = time.monotonic() + every
    while left and not hurry() and time.monotonic() < deadline:
        await asyncio.sleep(DRAIN_POLL_SECONDS)
        left = in_flight()
        now = time.monotonic()
        if left and now >= next_progress and now < deadline:
            log.warning(
                "stopping: %d jobs still in flight; waiting up to %.1fs more", left, deadline - now
            )
            next_progress = now + every
    if left:
        why = "a second signal" if hurry() else "the end of the grace"
        log.warning(
            "stopping at %s: %d jobs still in flight are cut off; the queue's next owner"
            " runs them again",
            why,
            left,
        )
    return left
