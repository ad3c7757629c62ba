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
import sqlalchemy as sa

from hipq.transactional import EnqueueError, add_job

HERE = Path(__file__).resolve().parent


def serve(workdir: Path, database_url: str) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    """`hipq serve` with this example's config on ``database_url``, once it is ready."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["HIPQ_DATABASE_URL"] = database_url
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


def place_order(app: sa.Engine, order_id: int, job_type: str, fail: bool = False) -> int:
    """The application's code: the order row and its receipt job, one transaction."""
    with app.begin() as conn:
        conn.execute(sa.text("INSERT INTO orders (id) VALUES (:id)"), {"id": order_id})
        job_id = add_job(conn, job_type, {"order_id": order_id})
        if fail:
            raise RuntimeError("payment declined")  # leaving the block rolls back both
    return job_id


def demo(app: sa.Engine, client: httpx.Client) -> bool:
    with app.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS orders (id integer PRIMARY KEY)"))
    job_id = place_order(app, 1, "send_receipt")
    print(f"order 1 committed with receipt job {job_id}")
    try:
        place_order(app, 2, "send_receipt", fail=True)
    except RuntimeError as exc:
        print(f"order 2 rolled back ({exc}): no order, no job")
    try:
        place_order(app, 3, "send_reciept")
    except EnqueueError as exc:
        print(f"order 3 refused, rolled back: {exc}")
    job = wait_for(lambda: finished(client, job_id), f"job {job_id} to finish")
    print(f"job {job_id} {job['state']}: {job['result']} (key {job['correlation_key']})")
    with app.connect() as conn:
        stored = [r[0] for r in conn.execute(sa.text("SELECT id FROM orders ORDER BY id"))]
    jobs = client.get("/v1/jobs").json()["jobs"]
    print(f"orders stored: {stored}; jobs stored: {[j['id'] for j in jobs]}")
    return job["state"] == "completed" and stored == [1] and len(jobs) == 1


def application_url(database_url: str) -> str:
    """hipq's URL (an asyncio driver) as the application's sync SQLAlchemy URL."""
    scheme, rest = database_url.split("://", 1)
    return ("sqlite" if scheme.startswith("sqlite") else "postgresql+psycopg") + "://" + rest


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'hipq.db'}"
        if "--database-url" in sys.argv:
            url = sys.argv[sys.argv.index("--database-url") + 1]
        server, client = serve(Path(tmp), url)
        app = sa.create_engine(application_url(url))
        try:
            if not demo(app, client):
                sys.exit(1)
        finally:
            app.dispose()
            server.send_signal(signal.SIGTERM)
            server.wait(30)


if __name__ == "__main__":
    main()
