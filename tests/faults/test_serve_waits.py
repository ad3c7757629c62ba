"""`hipq serve` waits for a database that is down or not yet up: its HTTP server answers
meanwhile (/healthz 200, /readyz 503), and it gives up with one line naming the cause."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import HIPQ, write_config
from tests.faults.proxy import TcpProxy
from tests.peers import free_port
from tests.support import eventually

pytestmark = pytest.mark.postgres


@contextlib.asynccontextmanager
async def serve(config: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    process = await asyncio.create_subprocess_exec(
        str(HIPQ),
        "serve",
        "--config",
        str(config),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ},
    )
    try:
        yield process, ""
    finally:
        if process.returncode is None:
            process.terminate()
            await asyncio.wait_for(process.wait(), 30)


async def status(api: httpx.AsyncClient, path: str) -> int | None:
    try:
        return (await api.get(path)).status_code
    except httpx.TransportError:
        return None


def config_for(tmp_path: Path, database_url: str, port: int, **overrides: Any) -> Path:
    server = {"host": "127.0.0.1", "port": port}
    return write_config(tmp_path / "hipq.yaml", database_url, server=server, **overrides)


async def test_a_database_that_never_comes_is_one_line_after_the_wait(tmp_path: Path) -> None:
    port = free_port()
    nothing = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/hipq"
    config = config_for(tmp_path, nothing, port, database_wait="4s")
    async with (
        serve(config) as (process, _),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as api,
    ):
        await eventually(lambda: _is(api, "/healthz", 200), timeout=60)
        assert await status(api, "/readyz") == 503
        assert await status(api, "/v1/jobs") == 503
        assert process.stderr is not None
        err = (await asyncio.wait_for(process.stderr.read(), 30)).decode()
        code = await asyncio.wait_for(process.wait(), 30)
    assert code != 0
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) <= 3, err  # the wait announced (service, LISTEN), why it ended
    assert lines[-1].startswith("error: the database is unavailable (waited 4s)"), err
    assert "Connect" in lines[-1] or "refused" in lines[-1], err


async def test_a_database_that_comes_up_during_the_wait_is_served(
    tmp_path: Path, postgres_url_fresh: str
) -> None:
    proxy = TcpProxy.for_url(postgres_url_fresh)
    proxy.port = free_port()  # nothing listens there yet
    port = free_port()
    config = config_for(tmp_path, proxy.url(postgres_url_fresh), port, database_wait="60s")
    try:
        async with (
            serve(config),
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as api,
        ):
            await eventually(lambda: _is(api, "/healthz", 200), timeout=60)
            assert await status(api, "/readyz") == 503
            await proxy.start()
            await eventually(lambda: _is(api, "/readyz", 200), timeout=60)
            posted = await api.post("/v1/jobs", json={"type": "record"})
            assert posted.status_code == 201, posted.text
    finally:
        await proxy.close()


async def _is(api: httpx.AsyncClient, path: str, code: int) -> bool:
    return await status(api, path) == code
