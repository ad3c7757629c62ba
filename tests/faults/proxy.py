"""A TCP proxy on 127.0.0.1 in front of the test PostgreSQL, which a test can cut:
the database as hipq sees it goes away and comes back, the real server untouched."""

from __future__ import annotations

import asyncio
import contextlib

from sqlalchemy.engine import make_url


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()

    @classmethod
    def for_url(cls, database_url: str) -> TcpProxy:
        url = make_url(database_url)
        return cls(url.host or "127.0.0.1", url.port or 5432)

    def url(self, database_url: str) -> str:
        """``database_url`` through this proxy."""
        url = make_url(database_url).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)

    async def start(self) -> None:
        """Listen (again, on the same port once it had one)."""
        self._server = await asyncio.start_server(
            self._accept, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def reset(self) -> None:
        """Abort every open connection (as a restart or a network reset would)."""
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    async def cut(self) -> None:
        """The database is gone: connections reset, new ones refused."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self.reset()

    async def close(self) -> None:
        await self.cut()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._links.update((writer, up_writer))
        for pipe in (self._pipe(reader, up_writer), self._pipe(up_reader, writer)):
            task = asyncio.ensure_future(pipe)
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self._links.discard(writer)
            with contextlib.suppress(Exception):
                writer.transport.abort()
