"""Connections kept checked out of their pool between one-statement writes.

A single-job POST on PostgreSQL is one autocommit statement (``hipq.store.unnest``).
Drawing its connection from SQLAlchemy's pool and giving it back cost more CPU than
the statement itself: a greenlet hop for the checkout, another for the raw
connection, a third for the checkin, and the pool's events. Here a connection,
once drawn, stays out of the pool and goes back to the list of ``HeldConnections``
after each statement; the next statement takes it again in a few attribute reads.

The backends of the connections out of the pool are known (``backends``): what they
NOTIFY this process has delivered to itself already, and its LISTEN connection can
leave their echo alone.

The pool's own rule still decides when a connection may be dead: one that waited
longer than the engine's ping delay, or whose socket has something to read, is
pinged before it is used, as the pool's checkout pings (``_checkout_ping``), and
invalidated if it does not answer. So is one that an error may have left unusable
(a lost connection, a cancelled statement): the pool opens another. The engine's pool
bounds how many are out at once. A server that ends its sessions (a restart, an
operator) may be seen in the instant between the end's message and the connection's
close, when asyncpg refuses a statement before sending it (``ended_unsent``): the
caller may send it again on another connection, and the others left idle are pinged
before their next use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["Held", "HeldConnections", "ended_unsent"]


@dataclass(eq=False)
class Held:
    """One connection out of the pool: SQLAlchemy's, its pooled record (whose ``info``
    carries the session's settings) and the asyncpg connection under it."""

    conn: AsyncConnection
    raw: Any
    driver: Any
    backend: int
    returned_at: float = field(default=0.0)


def ended_unsent(exc: BaseException) -> bool:
    """Whether a statement was refused before anything was sent: asyncpg had read the
    server's end of the session (its FATAL error) but not yet the connection's close,
    and refuses a new operation ("another operation is in progress"). The statement
    may be sent again on another connection."""
    orig = getattr(exc, "orig", None) if isinstance(exc, sa_exc.DBAPIError) else exc
    return isinstance(orig, asyncpg.InternalClientError)


def _leaves_connection_usable(exc: BaseException, held: Held) -> bool:
    """An error the server reported for the statement (a constraint, a timeout): it
    ended, and outside a transaction nothing is left open. Anything else (the
    connection lost, the statement cancelled while under way) may have left it busy
    or broken, and so has an error that ended the session (FATAL: the server's
    process was terminated), though the server reported it too."""
    orig = getattr(exc, "orig", None) if isinstance(exc, sa_exc.DBAPIError) else exc
    return (
        isinstance(orig, asyncpg.PostgresError)
        and getattr(orig, "severity", None) not in ("FATAL", "PANIC")
        and not held.driver.is_closed()
    )


class HeldConnections:
    """``engine``'s connections, each kept out of the pool while it stays fresh.

    ``fresh(held)``: whether a connection given back ``idle`` seconds ago may be used
    again without the pool's check."""

    def __init__(
        self,
        engine: AsyncEngine,
        fresh: Callable[[Held, float], bool],
        ping_timeout_seconds: float,
    ) -> None:
        self.engine = engine
        self._fresh = fresh
        self._ping_timeout = ping_timeout_seconds
        self._idle: list[Held] = []
        # The server process ids of the connections out of the pool, idle or in use.
        self.backends: set[int] = set()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Held]:
        """A connection for statements outside any transaction, given back after."""
        held = await self._take()
        try:
            yield held
        except BaseException as exc:
            if _leaves_connection_usable(exc, held):
                self._give_back(held)
            else:
                await self._discard(held)
                if ended_unsent(exc):
                    # Its server process ended it (a restart, an operator): so it may
                    # have ended those idle beside it, each pinged before its next use.
                    for idle in self._idle:
                        idle.returned_at = float("-inf")
            raise
        self._give_back(held)

    async def _take(self) -> Held:
        now = time.monotonic()
        while self._idle:
            held = self._idle.pop()  # the most recently used: the warmest
            if held.driver.is_closed():  # its end already read: no ping can revive it
                await self._discard(held)
                continue
            if self._fresh(held, now - held.returned_at) or await self._answers(held):
                return held
            await self._discard(held)
        conn = await self.engine.connect()
        try:
            raw = await conn.get_raw_connection()
        except BaseException:
            await conn.close()
            raise
        driver: Any = raw.driver_connection
        held = Held(conn, raw, driver, driver.get_server_pid())
        self.backends.add(held.backend)
        return held

    async def _answers(self, held: Held) -> bool:
        """The pool's ping (an empty statement), bounded: a server that went away
        without the end reaching us may not answer at all."""
        try:
            await held.driver.fetchrow(";", timeout=self._ping_timeout)
        except Exception:
            return False
        return True

    def _give_back(self, held: Held) -> None:
        held.returned_at = time.monotonic()
        self._idle.append(held)

    async def close(self) -> None:
        """Return every idle connection to the pool (before the engine is disposed)."""
        idle, self._idle = self._idle, []
        for held in idle:
            self.backends.discard(held.backend)
            await held.conn.close()

    async def _discard(self, held: Held) -> None:
        self.backends.discard(held.backend)

        # Shielded: a cancelled caller must not leave the connection out of the pool.
        async def invalidate() -> None:
            try:
                await held.conn.invalidate()
            finally:
                await held.conn.close()

        await asyncio.shield(invalidate())
