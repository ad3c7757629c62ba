"""Run `hipq serve` as real subprocesses: config files, free ports, readiness, cleanup.

Each server's stderr goes to a file; the ``servers`` fixture kills whatever is
still running at teardown and prints every server's log tail there, which pytest
shows only when the test failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from tests.e2e.e2e_handlers import RUNS_FILE_ENV, WORK_MS_ENV
from tests.services import READY_TIMEOUT

REPO = Path(__file__).resolve().parents[2]
HIPQ = Path(sys.executable).with_name("hipq")
_T = TypeVar("_T")


def _die_with_parent() -> None:
    # Linux: the server gets SIGKILL if the test process dies without its cleanup.
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(
    check: Callable[[], _T],
    timeout: float,
    what: str,
    interval: float = 0.05,
    describe: Callable[[], str] | None = None,
) -> _T:
    """Poll ``check()`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            extra = f"\n{describe()}" if describe else ""
            raise AssertionError(f"{what}: not within {timeout:g}s (last: {last!r}){extra}")
        time.sleep(interval)


def write_config(path: Path, database_url: str, **overrides: Any) -> Path:
    """A YAML config with one python job type, ``record`` (tests.e2e.e2e_handlers)."""
    config: dict[str, Any] = {
        "database_url": database_url,
        "migrate_on_start": True,
        "log_level": "warning",
        "queues": {"default": {"concurrency": 50, "batch_interval": "200ms"}},
        "job_types": {
            "record": {
                "transport": {"python": {"handler": "tests.e2e.e2e_handlers:record"}},
                "retry": {"strategy": "fixed", "delay": "1s", "max_attempts": 3},
            }
        },
    }
    config.update(overrides)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass
class HipqServer:
    """One `hipq serve` subprocess."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    stderr_path: Path
    client: httpx.Client = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def describe(self) -> str:
        state = "running" if self.alive() else f"exited with {self.process.returncode}"
        return f"--- hipq serve {self.name} (pid {self.pid}, {state}) stderr:\n{self.log_tail()}"

    def get(self, path: str, **kwargs: Any) -> Any:
        response = self.client.get(path, **kwargs)
        response.raise_for_status()
        return response.json()

    def post(self, path: str, body: Any) -> Any:
        response = self.client.post(path, json=body)
        assert response.status_code < 300, f"POST {path}: {response.status_code} {response.text}"
        return response.json()

    def ready(self) -> bool:
        if not self.alive():
            raise AssertionError(f"hipq serve {self.name} exited early\n{self.describe()}")
        try:
            return self.client.get("/readyz", timeout=30).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, exactly like a crash."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.client.close()


class Servers:
    """Starts `hipq serve` processes for one test and cleans all of them up."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.runs_file = tmp_path / "runs.txt"
        self.started: list[HipqServer] = []

    def start(
        self,
        name: str,
        config: Path,
        *,
        work_ms: int = 20,
        ready_timeout: float = READY_TIMEOUT,
        args: tuple[str, ...] = (),
    ) -> HipqServer:
        """Start `hipq serve` (with ``args``) on a free port and wait for /readyz."""
        for _ in range(3):
            server = self._spawn(name, config, work_ms, args)
            try:
                wait_for(
                    server.ready,
                    ready_timeout,
                    f"hipq serve {name} ready",
                    describe=server.describe,
                )
                return server
            except AssertionError:
                # The free port can be taken between probing and binding: try another.
                if server.alive() or "cannot listen" not in server.log_tail():
                    raise
        raise AssertionError(f"hipq serve {name} found no free port\n{server.describe()}")

    def _spawn(self, name: str, config: Path, work_ms: int, args: tuple[str, ...]) -> HipqServer:
        port = free_port()
        stderr_path = self.tmp_path / f"{name}.stderr"
        # A developer's HIPQ_ variables would override the test's config.
        env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
                ),
                RUNS_FILE_ENV: str(self.runs_file),
                WORK_MS_ENV: str(work_ms),
            }
        )
        with open(stderr_path, "ab") as err:
            process = subprocess.Popen(
                [str(HIPQ), "serve", "--config", str(config), "--port", str(port), *args],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.tmp_path,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        server = HipqServer(
            name,
            port,
            process,
            stderr_path,
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30),
        )
        self.started.append(server)
        return server

    def close(self) -> None:
        for server in self.started:
            server.stop()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    started = Servers(tmp_path)
    try:
        yield started
    finally:
        started.close()
        # Captured output of teardown is shown only when the test failed.
        for server in started.started:
            print(server.describe())
