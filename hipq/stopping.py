"""Ending background tasks at shutdown without cutting a transaction in half."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

# How long a task asked to stop may take to finish what it is doing.
GRACE_SECONDS = 5.0


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
