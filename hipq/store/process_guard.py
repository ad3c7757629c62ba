"""What guards a hipq process's use of its database, one per engine.

- SQLite: one ``hipq serve`` per file, by an exclusive lock on ``<file>.lock``.
- PostgreSQL: several processes share the database; each listens on one
  dedicated connection for the NOTIFY wake-ups of the others, reconnecting
  with a short backoff.

Both are ``hipq.activity.Activity``s that the service starts first and stops last.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url

from hipq.activity import Activity
from hipq.backoff import Backoff
from hipq.config import sqlite_lock_path, sqlite_served_message
from hipq.faults import FaultReporter
from hipq.store.records import StoreSetupError
from hipq.store.wakeup import CHANNEL

log = logging.getLogger("hipq.batch_loop.wakeup")

# The LISTEN connection's reconnect backoff. Kept short: while it is down, wake-ups
# from other processes wait for the next tick, and /readyz reports it.
RECONNECT_FIRST_SECONDS = 0.5
RECONNECT_MAX_SECONDS = 2.0


class ProcessGuard(Activity, Protocol):
    @property
    def listening(self) -> bool | None:
        """Whether wake-ups of other processes arrive; None: there are no others."""


class SqliteFileLock:
    """One ``hipq serve`` per SQLite file: an exclusive lock on ``<file>.lock``.

    SQLite serialises writers and has no LISTEN/NOTIFY, so hipq does not pretend to
    share a file between processes: the second one is refused with a clear message.
    """

    name = "sqlite-file-lock"
    listening = None  # no listener: wake-ups stay in this process

    def __init__(self, database_url: str) -> None:
        self._url = database_url
        self._file: IO[str] | None = None

    @property
    def path(self) -> Path:
        path = sqlite_lock_path(self._url)
        if path is None:
            raise StoreSetupError(
                "database_url: hipq serve needs a SQLite file, not an in-memory DB"
            )
        return path

    async def start(self) -> None:
        self._acquire()

    def _acquire(self) -> None:
        self._file = open(self.path, "a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "another process"
            self._file.close()
            self._file = None
            served = sqlite_served_message(self.path.with_suffix(""), holder)
            raise StoreSetupError(served) from None
        self._file.truncate(0)
        self._file.write(f"pid {os.getpid()}")
        self._file.flush()

    async def stop(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    async def run_once(self) -> bool:
        """Whether this process holds the lock."""
        return self._file is not None


def asyncpg_dsn(sqlalchemy_url: str) -> str:
    url = make_url(sqlalchemy_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


def asyncpg_connect_kwargs(sqlalchemy_url: str) -> dict[str, Any]:
    """asyncpg.connect() arguments for a SQLAlchemy URL (also one with ``?host=`` for a
    unix socket directory, as a local pgserver gives)."""
    url = make_url(sqlalchemy_url)
    host = url.host or url.query.get("host")
    if isinstance(host, tuple):
        host = host[0]
    return {
        "host": host,
        "port": url.port,
        "user": url.username,
        "password": url.password,
        "database": url.database,
    }


class PgListener:
    """LISTEN for the wake-ups other processes NOTIFY; ``on_payload`` gets each payload,
    but for those whose sender ``delivered`` says this process delivered already."""

    name = "pg-listener"

    def __init__(
        self,
        database_url: str,
        on_payload: Callable[[str], None],
        delivered: Callable[[int], bool] = lambda _backend: False,
    ) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self._on_payload = on_payload
        # Whether a server process's NOTIFYs were delivered in this process already.
        self._delivered = delivered
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="hipq-pg-listener")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @property
    def listening(self) -> bool:
        """Whether the LISTEN connection is up (else wake-ups fall back to ticks)."""
        return self.connected.is_set()

    async def run_once(self) -> bool:
        """Whether the LISTEN connection is up."""
        return self.listening

    async def _run(self) -> None:
        backoff = Backoff(first=RECONNECT_FIRST_SECONDS, cap=RECONNECT_MAX_SECONDS)
        faults = FaultReporter(log, "LISTEN connection")
        while True:
            conn = None
            try:
                conn = await asyncpg.connect(self._dsn, timeout=RECONNECT_MAX_SECONDS * 2)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(CHANNEL, self._notified)
                self.connected.set()
                faults.succeeded()
                backoff.reset()
                await lost.wait()
                faults.failed(ConnectionResetError("the LISTEN connection was closed"))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                faults.failed(exc)
            finally:
                self.connected.clear()
                if conn is not None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=2)
            await asyncio.sleep(backoff.next())

    def _notified(self, _conn: object, pid: int, _channel: str, payload: str) -> None:
        if not self._delivered(pid):
            self._on_payload(payload)
