"""A real `hipq serve` per engine for the client's tests, and a loopback proxy that
stands between the client and it to refuse (503) or lose answers on purpose."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import write_config
from tests.services import create_database_sync, drop_database_sync, unique_database_name
from tests.test_cli import JOB_TYPES, REPO, Server, _die_with_parent, _env, serving, wait_for

pytestmark = pytest.mark.e2e

JOB_TYPES_WITH_RETRY = {
    **JOB_TYPES,
    "echo": {"transport": {"python": {"handler": "hipq.handlers:echo"}}},
    "flaky": {
        "transport": {"python": {"handler": "tests.handlers:fail"}},
        "retry": {"strategy": "fixed", "delay": "1h", "max_attempts": 2},
    },
}


def client_config(path: Path, database_url: str, **overrides: Any) -> Path:
    return write_config(
        path,
        database_url,
        job_types=JOB_TYPES_WITH_RETRY,
        queues={
            "default": {"concurrency": 20, "batch_interval": "100ms"},
            "other": {"concurrency": 5, "batch_interval": "100ms"},
        },
        **overrides,
    )


def serving_the_example_config(tmp_path: Path) -> contextlib.AbstractContextManager[Server]:
    """`hipq serve` with config.example.yaml, as a reader of the docs runs it (on a
    SQLite file of this test): the docs' examples run against the config they name."""
    env = {"HIPQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'page.db'}"}
    return serving(REPO / "config.example.yaml", tmp_path / "serve.log", env=env)


def run_worked_example(page: str, tmp_path: Path) -> tuple[list[str], list[str]]:
    """Run the first python block of docs/<page> against a fresh `hipq serve` with
    config.example.yaml; answer the lines it printed and the lines of the page's first
    text block."""
    text = (REPO / "docs" / page).read_text()
    example, printed = (
        text.split(f"```{kind}\n")[1].split("```", 1)[0] for kind in ("python", "text")
    )
    with serving_the_example_config(tmp_path) as server:
        ran = subprocess.run(
            [sys.executable, "-c", example],
            capture_output=True,
            text=True,
            env={**_env(), "HIPQ_URL": server.url},
            timeout=120,
        )
    assert ran.returncode == 0, ran.stderr
    got, expected = ran.stdout.splitlines(), printed.splitlines()
    assert len(got) == len(expected), ran.stdout
    return got, expected


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def engine_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database of its own for this module's server, on each engine."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('client') / 'hipq.db'}"
        return
    admin = request.getfixturevalue("postgres_admin_url")
    name = unique_database_name("hipq_client")
    url = create_database_sync(admin, name)
    yield url
    drop_database_sync(admin, name)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def own_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database for one test's own server, on each engine."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'own.db'}"
        return
    admin = request.getfixturevalue("postgres_admin_url")
    name = unique_database_name("hipq_client")
    url = create_database_sync(admin, name)
    yield url
    drop_database_sync(admin, name)


@pytest.fixture(scope="module")
def server(engine_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("serve")
    with serving(client_config(tmp / "hipq.yaml", engine_url), tmp / "serve.log") as running:
        yield running


def start_serve(
    config: Path, port: int, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """`hipq serve` on ``port``, not waited for (for a client that comes first);
    ``env``: variables besides the test's (whose own HIPQ_ ones are left out)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                str(Path(sys.executable).with_name("hipq")),
                "serve",
                "--config",
                str(config),
                "--port",
                str(port),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**_env(), **(env or {})},
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )


@dataclass
class Proxy:
    """A loopback HTTP proxy in front of ``upstream``. Each request takes the next
    action of ``plan`` (then "forward"): "503" answers 503 with Retry-After itself,
    "lose" forwards the request and closes the connection instead of answering."""

    upstream: str
    plan: list[str] = field(default_factory=list)
    seen: list[tuple[str, str, str]] = field(default_factory=list)  # method, target, action
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            request_line, *lines = head.split("\r\n")
            method, target, _version = request_line.split(" ")
            headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines if line]
            length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
            body = await reader.readexactly(length)
            action = self.plan.pop(0) if self.plan else "forward"
            self.seen.append((method, target, action))
            if action == "503":
                await self._answer(
                    writer,
                    503,
                    {"content-type": "application/json", "retry-after": "1"},
                    b'{"error": "database_unavailable", "field": null, "message": "busy"}',
                )
                return
            passed = {
                k: v
                for k, v in headers
                if k.lower() not in ("host", "content-length", "connection")
            }
            async with httpx.AsyncClient(timeout=30) as http:
                answer = await http.request(
                    method, self.upstream + target, headers=passed, content=body
                )
            if action == "lose":
                return  # the server acted on it; the client hears nothing
            kept = ("content-type", "retry-after", "idempotent-replayed")
            await self._answer(
                writer,
                answer.status_code,
                {k: answer.headers[k] for k in kept if k in answer.headers},
                answer.content,
            )
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @staticmethod
    async def _answer(
        writer: asyncio.StreamWriter, status: int, headers: dict[str, str], body: bytes
    ) -> None:
        lines = [f"HTTP/1.1 {status} X", *(f"{k}: {v}" for k, v in headers.items())]
        lines += [f"content-length: {len(body)}", "connection: close", "", ""]
        writer.write("\r\n".join(lines).encode("latin-1") + body)
        await writer.drain()


@contextlib.asynccontextmanager
async def proxy_to(upstream: str) -> AsyncIterator[Proxy]:
    proxy = Proxy(upstream)
    listener = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    proxy.url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    async with listener:
        yield proxy


def count_jobs(server: Server, **params: Any) -> int:
    """Jobs the server holds that match ``params`` (read straight from the API)."""
    body = httpx.get(f"{server.url}/v1/jobs", params={"limit": 1000, **params}, timeout=30).json()
    return len(body["jobs"])


__all__ = ["Proxy", "Server", "client_config", "count_jobs", "proxy_to", "start_serve", "wait_for"]
