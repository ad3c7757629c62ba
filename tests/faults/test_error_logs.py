"""What the log and the client get when a request goes wrong, under a real server: an
unexpected error is one traceback and a 500 on a connection that stays open; a client
that drops its connection mid-body is one short line."""

from __future__ import annotations

import asyncio
import logging

import pytest
from fastapi import FastAPI

from hipq.app import create_app
from hipq.service import Service
from tests.api.conftest import api_settings, sqlite_url
from tests.peers import serve_app

__all__ = ["sqlite_url"]  # a fixture


class _Bug(Exception):
    pass


def _with_a_bug(app: FastAPI) -> FastAPI:
    async def broken() -> None:
        raise _Bug("a bug in a route")

    # A route of the test's own, first: what any route with a bug would do.
    app.add_api_route("/v1/broken", broken, methods=["GET"])
    app.router.routes.insert(0, app.router.routes.pop())
    return app


async def _request(port: int, raw: bytes, close: bool = False) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    if close:
        writer.close()
        return b""
    try:
        return await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()


async def _keep_alive_pair(port: int) -> tuple[bytes, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = []
    for path in ("/v1/broken", "/healthz"):
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        answers.append(head + await asyncio.wait_for(reader.readexactly(length), 10))
    writer.close()
    return answers[0], answers[1]


async def test_an_unexpected_error_is_logged_once_and_keeps_the_connection(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    service = Service(api_settings(sqlite_url), run_loops=False)
    await service.start()
    try:
        app = _with_a_bug(create_app(service, manage_service=False))
        async with serve_app(app) as base:
            port = int(base.rsplit(":", 1)[1])
            with caplog.at_level(logging.INFO):
                broken, probe = await _keep_alive_pair(port)
                assert broken.startswith(b"HTTP/1.1 500") and b"internal_error" in broken
                assert probe.startswith(b"HTTP/1.1 200")  # the same connection, still open
                tracebacks = [r for r in caplog.records if r.exc_info]
                assert len(tracebacks) == 1, [r.getMessage() for r in tracebacks]
    finally:
        await service.stop()


async def test_a_client_gone_mid_body_is_one_short_line(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    service = Service(api_settings(sqlite_url), run_loops=False)
    await service.start()
    try:
        async with serve_app(create_app(service, manage_service=False)) as base:
            port = int(base.rsplit(":", 1)[1])
            with caplog.at_level(logging.INFO):
                head = (
                    b"POST /v1/jobs HTTP/1.1\r\nHost: localhost\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
                    b'{"type": "ok", "payload": {"x": "'
                )
                await _request(port, head, close=True)
                for _ in range(200):
                    if caplog.records:
                        break
                    await asyncio.sleep(0.02)
                await asyncio.sleep(0.3)
                lines = [
                    r
                    for r in caplog.records
                    if r.levelno >= logging.INFO and r.name.startswith(("hipq.api", "uvicorn"))
                ]
                assert not [r for r in lines if r.exc_info or r.levelno >= logging.ERROR], [
                    r.getMessage() for r in lines
                ]
                assert len(lines) <= 1, [r.getMessage() for r in lines]
    finally:
        await service.stop()
