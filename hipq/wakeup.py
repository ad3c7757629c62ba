"""Waking a queue's loop when new input arrives from another process (PostgreSQL LISTEN).

In one process the API sets the loop's event directly. Across processes, every
insert NOTIFYs the queue's name (see ``hipq.store.dialects.notify``) and each
process listens on one dedicated connection, reconnecting with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from hipq.store.dialects import NOTIFY_CHANNEL

log = logging.getLogger("hipq.wakeup")


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
    def __init__(self, database_url: str, on_queue: Callable[[str], None]) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self._on_queue = on_queue
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="hipq-pg-listener")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        delay = 0.5
        while True:
            conn = None
            try:
                conn = await asyncpg.connect(self._dsn)
                lost = asyncio.Event()
                conn.add_termination_listener(lambda _c, lost=lost: lost.set())
                await conn.add_listener(NOTIFY_CHANNEL, self._notified)
                self.connected.set()
                delay = 0.5
                await lost.wait()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("LISTEN connection failed (%s); retrying in %.1fs", exc, delay)
            finally:
                self.connected.clear()
                if conn is not None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=2)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 15.0)

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self._on_queue(payload)
