"""`hipq healthcheck`, the container's HEALTHCHECK: 0 when the local server's /readyz
is 200, 1 with one line otherwise."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.e2e.conftest import HIPQ
from tests.peers import free_port, serve_app


def _config(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "hipq.yaml"
    path.write_text(yaml.safe_dump({"server": {"port": port}}))
    return path


async def _check(config: Path) -> subprocess.CompletedProcess[str]:
    process = await asyncio.create_subprocess_exec(
        str(HIPQ),
        "healthcheck",
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return subprocess.CompletedProcess([], process.returncode, out.decode(), err.decode())


async def test_ready_is_0_and_not_ready_or_down_is_1_with_one_line(tmp_path: Path) -> None:
    status = {"code": 200}

    async def readyz(request: Request) -> JSONResponse:
        assert request.headers["host"] == "localhost"  # allowed by every Host allow-list
        return JSONResponse({"status": "x"}, status["code"])

    port = free_port()
    config = _config(tmp_path, port)
    async with serve_app(Starlette(routes=[Route("/readyz", readyz)]), port):
        ready = await _check(config)
        assert (ready.returncode, ready.stdout.strip()) == (0, "ready")
        status["code"] = 503
        busy = await _check(config)
        assert busy.returncode == 1
        assert (
            busy.stderr.strip() == f"error: not ready: http://127.0.0.1:{port}/readyz answered 503"
        )
    down = await _check(config)
    assert down.returncode == 1
    assert down.stderr.strip().startswith("error: not ready:")
    assert len(down.stderr.strip().splitlines()) == 1
