"""A simple job: start `hipq serve`, post one job, wait for its result.

python examples/simple-job/run.py
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

HERE = Path(__file__).resolve().parent


def serve(workdir: Path) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    """`hipq serve` with this example's config on a fresh SQLite file, once it is ready."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["HIPQ_DATABASE_URL"] = f"sqlite+aiosqlite:///{workdir / 'hipq.db'}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    with open(workdir / "hipq.log", "wb") as log:  # the server's own copy stays open
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from hipq.commands.main import main; main()",
                "serve",
                "--config",
                str(HERE / "config.yaml"),
                "--port",
                str(port),
            ],
            env=env,
            cwd=workdir,
            stderr=log,
        )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    wait_for(lambda: _ready(client, server), "hipq serve to be ready")
    return server, client


def _ready(client: httpx.Client, server: subprocess.Popen[bytes]) -> bool:
    if server.poll() is not None:
        sys.exit(f"hipq serve exited with {server.returncode}")
    try:
        return client.get("/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(check: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    sys.exit(f"gave up waiting for {what}")


def finished(client: httpx.Client, job_id: int) -> dict[str, Any] | None:
    job = client.get(f"/v1/jobs/{job_id}").json()
    return job if job["state"] in ("completed", "failed", "cancelled") else None


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server, client = serve(Path(tmp))
        try:
            job_fields = {
                "type": "import_rows",
                "payload": {"rows": ["a", "b", "c", "d", "e"], "fail_after": 3},
            }
            posted = client.post("/v1/jobs", json=job_fields)
            posted.raise_for_status()
            job_id = posted.json()["id"]
            print(f"posted job {job_id}: import 5 rows, the first attempt fails after 3")
            job = wait_for(lambda: finished(client, job_id), f"job {job_id} to finish")
            for attempt in job["attempts"] or []:
                print(
                    f"attempt {attempt['attempt']}: {attempt['outcome']} {attempt['error'] or ''}"
                )
            print(f"job {job_id} {job['state']}: {job['result']}")
            if job["state"] != "completed" or job["result"]["resumed_at_row"] != 3:
                sys.exit(1)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)


if __name__ == "__main__":
    main()
