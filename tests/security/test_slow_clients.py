"""Slow clients against a real server: headers and bodies that never finish are cut
off, one address holds a share of the connections, and the refusals are logged once."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from hipq.api.connection_limits import ConnectionLimits
from hipq.api.request_guards import RequestGuards
from hipq.api.slow_clients import header_timeout_protocol
from hipq.config import ServerConfig
from tests.api.conftest import Api
from tests.api.conftest import sqlite_api as sqlite_api  # a fixture: the API on SQLite
from tests.api.conftest import sqlite_url as sqlite_url  # the fixture it needs
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


async def _read_body(scope: dict, receive: Any, send: Any) -> None:
    """Reads its whole body, then answers how many bytes it got."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = str(size).encode()
    head = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": head})
    await send({"type": "http.response.body", "body": body})


async def test_a_body_trickled_in_is_cut_off_at_one_deadline_for_the_whole_body() -> None:
    # A byte every 0.1 s never pauses for the 0.5 s the deadline gives the whole body.
    guarded = RequestGuards(_read_body, ServerConfig(body_read_timeout=0.5))
    async with serve_app(guarded, http=header_timeout_protocol(30)) as base:
        port = int(base.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/callbacks/x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000\r\n\r\n"
        )
        answer = asyncio.ensure_future(reader.read(1000))
        sent = 0
        while not answer.done() and sent < 1000:
            writer.write(b"x")
            await writer.drain()
            sent += 1
            await asyncio.sleep(0.1)
        head = await asyncio.wait_for(answer, 10)
        writer.close()
    assert head.startswith(b"HTTP/1.1 408"), head
    assert b"not complete within 0.5s" in head
    assert sent < 1000  # cut off long before the body was complete


async def _opened(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def test_one_address_holds_at_most_its_share_of_connections(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limits = ConnectionLimits(2)
    caplog.set_level(logging.WARNING, "hipq.api")
    async with serve_app(_ok, http=header_timeout_protocol(30, limits)) as base:
        port = int(base.rsplit(":", 1)[1])
        held = [await _opened(port) for _ in range(2)]
        for _, writer in held:
            writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
            await writer.drain()
        for _ in range(5):  # refused at once, before sending anything
            reader, writer = await _opened(port)
            refused = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert refused.startswith(b"HTTP/1.1 503"), refused
            assert b"too_many_connections" in refused and b"retry-after: 1" in refused
        held[0][1].close()
        await asyncio.wait_for(_closed(held[0][0]), 10)
        for _ in range(100):  # the server sees the close after the client does
            if not limits.peers or limits.peers["127.0.0.1"] < 2:
                break
            await asyncio.sleep(0.05)
        assert (await _get(port, "/")).startswith(b"HTTP/1.1 200")
        held[1][1].close()
    lines = [r.getMessage() for r in caplog.records if r.name == "hipq.api"]
    # The first refusal is logged; the next ones are counted into the interval's line.
    assert len(lines) == 1, lines
    assert "1 at server.max_connections_per_peer" in lines[0]


async def test_refusals_at_the_cap_are_logged_once_and_readyz_says_not_ready(
    sqlite_api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    app = sqlite_api.client._transport.app  # type: ignore[attr-defined]
    protocol = header_timeout_protocol(30, ConnectionLimits(None))
    async with serve_app(app, http=protocol, limit_concurrency=3) as base:
        port = int(base.rsplit(":", 1)[1])
        assert (await _get(port, "/readyz")).startswith(b"HTTP/1.1 200")
        held = [await _opened(port) for _ in range(3)]
        for _, writer in held:
            writer.write(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
            await writer.drain()
        for _ in range(5):
            assert (await _get(port, "/v1/queues")).startswith(b"HTTP/1.1 503")
        ready = await _get(port, "/readyz")
        assert ready.startswith(b"HTTP/1.1 503"), ready
        assert b'"connections":"refusing requests: server.max_connections' in ready
        assert (await _get(port, "/healthz")).startswith(b"HTTP/1.1 200")
        for _, writer in held:
            writer.close()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not any("Exceeded concurrency limit" in r.getMessage() for r in warnings)
    refused = [r.getMessage() for r in warnings if r.name == "hipq.api"]
    assert len(refused) == 1 and "1 at server.max_connections" in refused[0], refused
