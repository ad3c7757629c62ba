"""A response's head leaves with its body in one write, and never waits for a body
that comes later (or never)."""

from __future__ import annotations

import asyncio
from typing import Any

from hipq.api.one_send import OneSendProtocol, _HeadWithBody
from tests.peers import serve_app


class _Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class _Cycle:
    response_started = False


async def test_the_head_and_the_body_are_one_write() -> None:
    transport, cycle = _Recording(), _Cycle()
    held = _HeadWithBody(transport, cycle, asyncio.get_running_loop())  # type: ignore[arg-type]
    held.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the start: at once
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    cycle.response_started = True
    held.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert len(transport.writes) == 1
    held.write(b"body")
    held.write(b"more")
    assert transport.writes[1:] == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"more"]
    await asyncio.sleep(0)  # the next turn of the loop finds nothing held
    assert len(transport.writes) == 3
    assert not held.is_closing()


async def test_a_head_without_a_body_goes_at_the_next_turn_or_at_close() -> None:
    loop = asyncio.get_running_loop()
    transport, cycle = _Recording(), _Cycle()
    cycle.response_started = True
    held = _HeadWithBody(transport, cycle, loop)  # type: ignore[arg-type]
    held.write(b"HTTP/1.1 204 No Content\r\n\r\n")
    await asyncio.sleep(0)
    assert transport.writes == [b"HTTP/1.1 204 No Content\r\n\r\n"]

    transport, cycle = _Recording(), _Cycle()
    cycle.response_started = True
    held = _HeadWithBody(transport, cycle, loop)  # type: ignore[arg-type]
    held.write(b"HTTP/1.1 200 OK\r\n\r\n")
    held.close()
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\n"] and transport.closed


async def test_a_large_body_is_not_copied_onto_the_head() -> None:
    transport, cycle = _Recording(), _Cycle()
    cycle.response_started = True
    held = _HeadWithBody(transport, cycle, asyncio.get_running_loop())  # type: ignore[arg-type]
    held.write(b"HTTP/1.1 200 OK\r\n\r\n")
    held.write(b"x" * 100_000)
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\n", b"x" * 100_000]


async def test_served_answers_are_whole_and_a_late_body_does_not_hold_the_head() -> None:
    gate = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        if scope["path"] == "/late":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await gate.wait()  # the test reads the head first
            await send({"type": "http.response.body", "body": b"late"})
            return
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
        )
        await send({"type": "http.response.body", "body": b"ok"})

    async with serve_app(app, http=OneSendProtocol) as base:
        port = int(base.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for method in ("GET", "HEAD", "GET"):
            writer.write(f"{method} / HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200") and b"content-length: 2" in head
            if method == "GET":
                assert await asyncio.wait_for(reader.readexactly(2), 10) == b"ok"
        writer.write(b"GET /late HTTP/1.1\r\nHost: localhost\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200")
        gate.set()
        assert b"late" in await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 10)
        writer.close()
