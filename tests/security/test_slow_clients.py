"""Slow clients against a real server: headers that never finish are cut off."""

from __future__ import annotations

import asyncio

from hipq.api.slow_clients import header_timeout_protocol
from tests.peers import serve_app


async def _ok(scope: dict, receive: object, send: object) -> None:  # a tiny ASGI app
    assert scope["type"] == "http"
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]


async def _closed(reader: asyncio.StreamReader) -> bool:
    return await reader.read(1000) == b"" or reader.at_eof()


async def test_a_connection_whose_headers_never_finish_is_closed() -> None:
    async with serve_app(_ok, http=header_timeout_protocol(0.3)) as base:
        port = int(base.rsplit(":", 1)[1])
        silent = await asyncio.open_connection("127.0.0.1", port)
        partial = await asyncio.open_connection("127.0.0.1", port)
        partial[1].write(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        await partial[1].drain()
        for reader, writer in (silent, partial):
            assert await asyncio.wait_for(_closed(reader), 10)
            writer.close()
        # A whole request is answered, and its keep-alive connection may send another.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):
            writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"ok"), 10)
            assert head.startswith(b"HTTP/1.1 200")
        writer.close()


async def _get(port: int, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


async def test_the_probes_are_answered_while_slow_clients_hold_every_connection() -> None:
    async with serve_app(_ok, http=header_timeout_protocol(30), limit_concurrency=3) as base:
        port = int(base.rsplit(":", 1)[1])
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for _, writer in held:
            writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
            await writer.drain()
        assert (await _get(port, "/v1/queues")).startswith(b"HTTP/1.1 503")
        for probe in ("/healthz", "/readyz", "/healthz?x=1"):
            assert (await _get(port, probe)).startswith(b"HTTP/1.1 200"), probe
        for _, writer in held:
            writer.close()
