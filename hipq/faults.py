"""Database faults: telling an unavailable database from a bug, and reporting a fault
once instead of once per failure.

A fault is logged as one line when it starts (with its cause), a count every
``summary_seconds`` while it lasts, and one line when it ends. The API, the queue
loops, upkeep and the LISTEN connection each keep one ``FaultReporter``.
"""

from __future__ import annotations

import errno
import logging
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import exc as sa_exc

# PostgreSQL error classes that mean "not now" rather than "never": connection
# exceptions (08), insufficient resources (53: disk full, too many connections),
# operator intervention (57: shutdown, starting up, statement_timeout's cancel),
# lock_not_available (55P03: lock_timeout or NOWAIT), a read-only standby (25006),
# system errors (58: I/O).
_PG_TRANSIENT_CLASSES = ("08", "53", "57", "58")
_PG_TRANSIENT_STATES = ("55P03", "25006")
# SQLite reports a full disk, a lock held past the busy timeout and I/O trouble
# only in its messages.
_SQLITE_TRANSIENT = ("database is locked", "disk is full", "disk i/o error", "readonly database")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo.extend([e.__cause__, e.__context__, getattr(e, "orig", None)])


def _one_line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0][:200]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def disk_full(cause: str) -> bool:
    """Whether a fault's cause (``unavailable``'s line) is a full disk: SQLite's
    "database or disk is full", PostgreSQL's disk_full ("could not extend file ...
    No space left on device")."""
    lowered = cause.lower()
    return "disk is full" in lowered or "no space left" in lowered or "DiskFullError" in cause


def unavailable(exc: BaseException) -> str | None:
    """Why the database cannot serve right now (one short line), or None when ``exc``
    is not such a fault (a bug, a constraint, bad SQL)."""
    for e in _chain(exc):
        if isinstance(e, sa_exc.DBAPIError) and e.connection_invalidated:
            return _one_line(e.orig or e)
        if isinstance(e, sa_exc.TimeoutError):  # the pool had no connection to give
            return _one_line(e)
        if isinstance(e, asyncpg.PostgresError):
            state = str(getattr(e, "sqlstate", "") or "")
            if state.startswith(_PG_TRANSIENT_CLASSES) or state in _PG_TRANSIENT_STATES:
                return _one_line(e)
        if isinstance(e, asyncpg.InterfaceError | asyncpg.PostgresConnectionError):
            return _one_line(e)
        if isinstance(e, sqlite3.OperationalError):
            if any(m in str(e).lower() for m in _SQLITE_TRANSIENT):
                return _one_line(e)
        elif _network_fault(e):
            return _one_line(e)
    return None


# What a connection to the database fails with below the drivers: refused, reset,
# unreachable, a name that does not resolve, a timeout. Any other OSError (a file not
# found, a folder opened as a file) is no fault of the database.
_NETWORK_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.EHOSTDOWN,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.ENETRESET,
        errno.EADDRNOTAVAIL,
    }
)


def _network_fault(e: BaseException) -> bool:
    if isinstance(e, ConnectionError | TimeoutError | socket.gaierror):
        return True
    # asyncio's connect to a host of several addresses that all failed raises a plain
    # OSError("Multiple exceptions: ...") without an errno.
    return isinstance(e, OSError) and (
        e.errno in _NETWORK_ERRNOS or (type(e) is OSError and e.errno is None)
    )


class FaultReporter:
    """Logs a run of failures of one activity as a start, counts and an end."""

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        *,
        summary_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log, self.what = log, what
        self.summary_seconds, self.clock = summary_seconds, clock
        self.failures = 0  # in the fault under way; 0: none
        self.database_fault = False  # whether the fault under way is the database's
        self.cause = ""  # the latest failure's, in one line
        self.last_failure = 0.0  # monotonic time of the latest failure
        self._started = self._summarised = 0.0
        self._counted = 0

    @property
    def active(self) -> bool:
        return self.failures > 0

    def database_failed_within(self, seconds: float) -> str | None:
        """The cause, if a database fault under way last failed within ``seconds``."""
        recent = self.clock() - self.last_failure < seconds
        return self.cause if self.active and self.database_fault and recent else None

    def failed(self, exc: BaseException) -> str | None:
        """Count a failure; log it if it starts a fault. The database's cause, or None."""
        cause = unavailable(exc)
        now = self.clock()
        self.last_failure = now
        self.cause = cause or _one_line(exc)
        self.failures += 1
        if self.failures == 1:
            self._started = self._summarised = now
            self._counted = 0
            self.database_fault = cause is not None
            if cause is not None:
                self.log.warning("%s: database unavailable (%s)", self.what, cause)
            else:  # not the database's: a bug, whose traceback is worth one copy
                self.log.error("%s: failing", self.what, exc_info=exc)
        elif now - self._summarised >= self.summary_seconds:
            self.log.warning(
                "%s: still failing, %d failures in %.0fs (latest: %s)",
                self.what,
                self.failures - self._counted,
                now - self._summarised,
                self.cause,
            )
            self._summarised, self._counted = now, self.failures
        return cause

    def succeeded(self) -> None:
        """The activity worked again: end the fault under way, if any, with one line."""
        if self.failures:
            self.log.warning(
                "%s: recovered after %d failures over %.1fs",
                self.what,
                self.failures,
                self.clock() - self._started,
            )
            self.failures = 0
            self.database_fault = False
