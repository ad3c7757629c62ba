"""Group commit: requests that arrive while a write runs share the next transaction.

A transaction (with its commit and, on PostgreSQL, its round trips and NOTIFY) per
request makes the database the limit of concurrent clients. A ``GroupCommit`` keeps
one writer task: it writes every item that arrived while the previous write ran, so
a burst costs a few transactions, and a lone item is written at once, with no added
wait. Each caller still gets its own answer only after the commit.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class GroupCommit(ABC, Generic[Item, Result]):
    """An ``Activity`` whose work arrives through ``submit``: it has nothing to start,
    and stopping waits for the items already accepted. Subclasses write a group."""

    name = "group-commit"
    # Items per transaction; more wait for the next one.
    max_group = 1000

    def __init__(self) -> None:
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._writer: asyncio.Task[None] | None = None

    @abstractmethod
    async def write_group(self, items: list[Item]) -> Sequence[Result | Exception]:
        """Write ``items`` in one transaction: each one's result, or the exception that
        refused it alone. Raising fails every item of the group."""

    async def submit(self, item: Item) -> Result:
        """Write ``item`` with whatever else is waiting; its result once committed."""
        done: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        # Retrieved here too, so that a failure nobody waits for any more is not logged as lost.
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._waiting.append((item, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name=f"hipq-{self.name}")
        # A caller that gives up (its client went away) cancels only its own answer: the
        # write runs in the writer's task, and the other items in its transaction still
        # need it. (No shield: its extra future cost each answer a turn of the loop.)
        return await done

    async def start(self) -> None:
        """Nothing to start: the first ``submit`` starts a writer."""

    async def stop(self) -> None:
        await self.close()

    async def run_once(self) -> int:
        """Write the items waiting now, in the caller's task; how many waited."""
        waiting = len(self._waiting)
        await self.close()
        if self._waiting:
            await self._drain()
        return waiting

    async def close(self) -> None:
        """Wait for the writes already accepted."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)

    async def _drain(self) -> None:
        while self._waiting:
            group = self._waiting[: self.max_group]
            self._waiting = self._waiting[self.max_group :]
            try:
                await self._write(group)
            except BaseException:
                # Cancelled (at shutdown): no caller answers 2xx, so each client retries.
                for _, done in [*group, *self._waiting]:
                    if not done.done():
                        done.cancel()
                self._waiting.clear()
                raise

    async def _write(self, group: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        try:
            results = await self.write_group([item for item, _ in group])
        except Exception as exc:  # the transaction as a whole failed: every item did
            for _, done in group:
                if not done.done():
                    done.set_exception(exc)
            return
        for (_, done), result in zip(group, results, strict=True):
            if done.done():
                continue
            if isinstance(result, Exception):
                done.set_exception(result)
            else:
                done.set_result(result)
