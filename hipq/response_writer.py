"""Webhook responses stored together: one transaction for all callbacks waiting.

Each callback must be durable before its 202, and a transaction (with its commit
and, on PostgreSQL, a NOTIFY) per callback made the database the limit of the
webhook: under load the callbacks also held a pool connection each. Here one
writer stores every response that arrived while the previous write ran (group
commit), so a burst of callbacks costs a few transactions, and a lone callback
is written at once, with no added wait.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from hipq.events import Events
from hipq.store import NewResponse, Store

# Responses per transaction; more wait for the next one.
MAX_BATCH = 1000


class ResponseWriter:
    """An ``Activity`` whose work arrives through ``write``: it has nothing to start,
    and stopping waits for the writes already accepted."""

    name = "response-writer"

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        ttl: float,
        events: Events | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl = ttl
        self._events = events or Events()
        self._waiting: list[tuple[NewResponse, asyncio.Future[int]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def write(self, response: NewResponse) -> int:
        """Store ``response``; returns its id once it is committed."""
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        # Retrieved here too, so that a failure nobody waits for any more is not logged as lost.
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._waiting.append((response, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name="hipq-response-writer")
        # A caller that gives up (its client went away) leaves the write to go on:
        # the other callbacks in its transaction still need it.
        return await asyncio.shield(done)

    async def start(self) -> None:
        """Nothing to start: the first ``write`` starts a writer."""

    async def stop(self) -> None:
        await self.close()

    async def run_once(self) -> int:
        """Store the responses waiting now, in the caller's task; how many waited."""
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
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            try:
                await self._store_batch(batch)
            except BaseException:
                # Cancelled (at shutdown): no caller answers 202, so each sender retries.
                for _, done in [*batch, *self._waiting]:
                    if not done.done():
                        done.cancel()
                self._waiting.clear()
                raise

    async def _store_batch(self, batch: list[tuple[NewResponse, asyncio.Future[int]]]) -> None:
        try:
            ids = await self._store.response_insert_many(
                [response for response, _ in batch], self._clock(), self._ttl
            )
        except Exception as exc:
            if len(batch) == 1 or not _refused_rows(exc):
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                return
            # One response the database refuses must not fail the others that
            # happened to share its transaction: store each on its own.
            for item in batch:
                await self._store_batch([item])
            return
        for (_, done), response_id in zip(batch, ids, strict=True):
            if not done.done():
                done.set_result(response_id)
        emit_stored(self._events, [response for response, _ in batch])


def emit_stored(events: Events, stored: list[NewResponse]) -> None:
    """Tell observers which responses reached the inbox, by source."""
    for source, count in Counter(response.source for response in stored).items():
        events.emit("responses_stored", source=source, count=count)


def _refused_rows(exc: Exception) -> bool:
    """Whether the database refused the rows themselves (a constraint, a value it
    cannot store) rather than failed as a whole (down, locked): only then can a
    retry of each row alone succeed for the others."""
    return isinstance(exc, DBAPIError) and not (
        exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError)
    )
