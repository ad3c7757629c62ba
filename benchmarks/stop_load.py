"""What the stop benchmark and the soak script share: a mixed load of python and HTTP
jobs whose every run is counted, a slow local stand-in peer, and `hipq serve` configs.

Each python run appends a line to a file (written with O_APPEND, so a process killed
mid-way never leaves half a line), and the peer counts the requests it received per
job: after the load, a job that ran or was sent more than once is a duplicate.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from hipq.transports.python import JobContext  # noqa: E402

RUNS_FILE_ENV = "STOP_BENCH_RUNS_FILE"


async def work(job: JobContext) -> dict[str, Any]:
    """A python job: note the run when it starts, then work ``payload.ms`` ms."""
    line = f"{job.id} {job.attempt} {os.getpid()}\n".encode()
    fd = os.open(os.environ[RUNS_FILE_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    await asyncio.sleep(float(job.payload.get("ms", 300)) / 1000)
    return {"pid": os.getpid()}


def python_runs(path: Path) -> Counter[int]:
    """Runs per job id, from the runs file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return Counter()
    return Counter(int(line.split()[0]) for line in text.splitlines() if line.strip())


def serve_env(runs_file: Path) -> None:
    """What `hipq serve` subprocesses need to import ``stop_load:work`` from here."""
    paths = [str(REPO), str(HERE), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    os.environ[RUNS_FILE_ENV] = str(runs_file)


class SlowPeer:
    """The external system: ``/reply`` answers after ``ms`` (the result is the answer),
    ``/accept`` answers 202 at once and calls the callback URL back after ``ms``."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.requests: Counter[str] = Counter()  # job key -> requests received
        self.callbacks_failed = 0
        self.client = httpx.AsyncClient(timeout=10)
        self._tasks: set[asyncio.Task[None]] = set()
        self.app = Starlette(
            routes=[
                Route("/reply", self._reply, methods=["POST"]),
                Route("/accept", self._accept, methods=["POST"]),
            ]
        )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.client.aclose()

    async def _reply(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests[str(body["key"])] += 1
        await asyncio.sleep(float(body.get("ms", 500)) / 1000)
        return JSONResponse({"ok": True})

    async def _accept(self, request: Request) -> JSONResponse:
        body = await request.json()
        key = str(body["key"])
        self.requests[key] += 1
        task = asyncio.create_task(self._call_back(request.headers["x-callback-url"], key, body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return JSONResponse({"accepted": True}, 202)

    async def _call_back(self, url: str, key: str, body: dict[str, Any]) -> None:
        """As webhook senders do: retry a refused or failed delivery, with backoff,
        for up to about a minute (the receiver may be restarting)."""
        await asyncio.sleep(float(body.get("ms", 100)) / 1000)
        for attempt in range(12):
            try:
                response = await self.client.post(url, json={"status": "ok", "key": key})
                if response.status_code < 500:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(min(10.0, 0.2 * 2**attempt))
        self.callbacks_failed += 1


def serve_config(url: str, port: int, peer_url: str, **extra: Any) -> dict[str, Any]:
    """python jobs on queue ``py``, HTTP jobs (answer and callback) on queue ``http``."""
    # The body is the payload ({"key", "ms"}; the callback URL added in callback mode).
    http_common = {"method": "POST", "timeout": "10s"}
    retry = {"strategy": "fixed", "delay": "200ms", "max_attempts": 25}
    config: dict[str, Any] = {
        "database_url": url,
        "migrate_on_start": True,
        "log_level": "warning",
        "server": {"host": "127.0.0.1", "port": port},
        "queues": {
            "py": {"concurrency": 20, "batch_interval": "100ms"},
            "http": {"concurrency": 10, "batch_interval": "100ms"},
        },
        "job_types": {
            "work": {
                "queue": "py",
                "transport": {"python": {"handler": "stop_load:work"}},
                "retry": retry,
            },
            "fetch": {
                "queue": "http",
                "transport": {
                    "http": {**http_common, "url": f"{peer_url}/reply", "callback": False}
                },
                "retry": retry,
            },
            "order": {
                "queue": "http",
                "correlation_key": "order-{payload.key}",
                "transport": {
                    "http": {
                        **http_common,
                        "url": f"{peer_url}/accept",
                        "callback_header": "x-callback-url",
                    }
                },
                "retry": retry,
            },
        },
    }
    config.update(extra)
    return config


async def open_jobs(client: httpx.AsyncClient, queues: tuple[str, ...]) -> dict[str, int]:
    """Jobs not yet terminal over ``queues``, by state, and the failed ones."""
    total = dict.fromkeys(("scheduled", "running", "awaiting", "failed"), 0)
    for name in queues:
        q = (await client.get(f"/v1/queues/{name}")).raise_for_status().json()
        for state in total:
            total[state] += int(q[state])
    return total


async def completed_count(client: httpx.AsyncClient, job_type: str) -> int:
    """Completed jobs of ``job_type``, through the list's cursor."""
    params: dict[str, str | int] = {"state": "completed", "type": job_type, "limit": 1000}
    count = 0
    while True:
        page = (await client.get("/v1/jobs", params=params)).raise_for_status().json()
        count += len(page["jobs"])
        if page["next_cursor"] is None:
            return count
        params["cursor"] = page["next_cursor"]
