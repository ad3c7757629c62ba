"""Graceful shutdown: SIGTERM lets the job in flight finish before `hipq serve` exits.

Run: python examples/graceful-shutdown/main.py

It starts a real `hipq serve` on a throwaway SQLite file, posts a job that takes 2 s,
and sends SIGTERM while the job runs. The server claims nothing more, waits for the
job (up to ``shutdown_grace``), records its result, and exits. A second server on the
same file then shows the job completed: nothing was cut off or sent twice.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(config: Path) -> subprocess.Popen[bytes]:
    hipq = Path(sys.executable).with_name("hipq")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen([str(hipq), "serve", "--config", str(config)], env=env)


def wait_for(check: Any, what: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            found = check()
        except httpx.HTTPError:
            found = None
        if found:
            return found
        time.sleep(0.05)
    raise SystemExit(f"gave up waiting for {what}")


def main() -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "hipq.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "database_url": f"sqlite+aiosqlite:///{Path(tmp) / 'hipq.db'}",
                    "migrate_on_start": True,
                    "log_level": "warning",
                    "shutdown_grace": "20s",
                    "server": {"port": port},
                    "queues": {"default": {"batch_interval": "100ms"}},
                    "job_types": {
                        "slow": {"transport": {"python": {"handler": "shutdown_handlers:slow"}}}
                    },
                }
            )
        )
        server = serve(config)
        try:
            wait_for(lambda: httpx.get(f"{base}/readyz").is_success, "hipq serve")
            posted = httpx.post(f"{base}/v1/jobs", json={"type": "slow"})
            if posted.status_code != 201:
                raise SystemExit(f"POST /v1/jobs: {posted.status_code} {posted.text}")
            job = posted.json()
            job_url = f"{base}/v1/jobs/{job['id']}"
            wait_for(lambda: httpx.get(job_url).json()["state"] == "running", "the job to run")
            print(f"job {job['id']} is running; sending SIGTERM")
            started = time.monotonic()
            server.send_signal(signal.SIGTERM)
            code = server.wait(timeout=60)
            print(f"hipq serve exited with {code} after {time.monotonic() - started:.1f}s")
        finally:
            if server.poll() is None:
                server.kill()
        server = serve(config)  # the same database, a new process
        try:
            wait_for(lambda: httpx.get(f"{base}/readyz").is_success, "hipq serve again")
            after = httpx.get(job_url).json()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
    attempts = [a["outcome"] for a in after["attempts"]]
    print(f"job {after['id']} {after['state']}: {after['result']} (attempts: {attempts})")


if __name__ == "__main__":
    main()
