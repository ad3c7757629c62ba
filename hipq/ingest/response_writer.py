"""Webhook responses stored together: one transaction for all callbacks waiting.

Each callback must be durable before its 202, and a transaction (with its commit
and, on PostgreSQL, a NOTIFY) per callback made the database the limit of the
webhook: under load the callbacks also held a pool connection each. Here one
writer stores every response that arrived while the previous write ran (group
commit), so a burst of callbacks costs a few transactions, and a lone callback
is written at once, with no added wait (``GroupCommit``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from hipq.events import Events
from hipq.ingest.group_commit import GroupCommit
from hipq.observability import tracing
from hipq.store import NewResponse, Store


class ResponseWriter(GroupCommit[NewResponse, int]):
    name = "response-writer"
    max_group = 1000

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        ttl: float,
        events: Events | None = None,
    ) -> None:
        super().__init__()
        self._store = store
        self._clock = clock
        self._ttl = ttl
        self._events = events or Events()

    async def write(self, response: NewResponse) -> int:
        """Store ``response``; returns its id once it is committed."""
        return await self.submit(response)

    async def write_group(self, items: list[NewResponse]) -> Sequence[int | Exception]:
        try:
            ids = await self._store.response_insert_many(items, self._clock(), self._ttl)
        except Exception as exc:
            if len(items) == 1 or not _refused_rows(exc):
                raise
            # One response the database refuses must not fail the others that
            # happened to share its transaction: store each on its own.
            results: list[int | Exception] = []
            for item in items:
                try:
                    results.extend(await self.write_group([item]))
                except Exception as alone:
                    results.append(alone)
            return results
        emit_stored(self._events, items)
        return ids


def emit_stored(events: Events, stored: list[NewResponse]) -> None:
    """Tell observers which responses reached the inbox, by source."""
    tracing.responses_received(stored)
    for source, count in Counter(response.source for response in stored).items():
        events.emit("responses_stored", source=source, count=count)


def _refused_rows(exc: Exception) -> bool:
    """Whether the database refused the rows themselves (a constraint, a value it
    cannot store) rather than failed as a whole (down, locked): only then can a
    retry of each row alone succeed for the others."""
    return isinstance(exc, DBAPIError) and not (
        exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError)
    )
