"""A port in use ends `hipq serve` with hipq's own one line, before it opens the
database for work or takes any queue's lease (a real `hipq serve` subprocess)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.test_cli import HIPQ, REPO, _env

pytestmark = pytest.mark.e2e


async def _lease_rows(database_url: str) -> list[tuple[str, str | None]]:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(text("SELECT name, lease_owner FROM hipq_queues"))
            return [(r[0], r[1]) for r in rows]
    finally:
        await engine.dispose()


async def test_a_port_in_use_ends_serve_with_one_line_and_takes_no_lease(
    database_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "hipq.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "database_url": database_url,
                "log_level": "info",  # the start-up lines that must not come first
                "queues": {"default": {}, "other": {}},
            }
        )
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = await asyncio.to_thread(
            subprocess.run,
            [HIPQ, "serve", "--config", str(config), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(),
            cwd=REPO,
        )
    assert result.returncode == 1, result
    assert result.stderr == f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    assert result.stdout == ""
    assert await _lease_rows(database_url) == []


async def test_connections_to_the_bound_socket_send_without_waiting_for_acks() -> None:
    # hipq binds its listening socket itself; asyncio turns Nagle's algorithm off only on
    # connections of a socket that says it is TCP. With Nagle on, every answer waited
    # ~40 ms for the client's delayed ACK (25 requests a second on one connection).
    from hipq.commands.main import listen

    listener = listen("127.0.0.1", 0)
    port = listener.getsockname()[1]
    nodelay: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        nodelay.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accepted, sock=listener)
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(nodelay, 5) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
