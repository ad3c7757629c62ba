"""Soak: a mixed load through random SIGKILLs and SIGTERMs and hostile requests.

    python benchmarks/soak.py --engine sqlite --minutes 3

For ``--minutes`` it posts batches of python jobs and HTTP jobs (answered by a slow
local peer, or accepted and called back later) to `hipq serve`, while a chaos loop
kills it with SIGKILL or SIGTERM every 8-20 s and restarts it on the same database,
and a hostile client sends malformed requests. Then it waits (bounded) until every
acknowledged job is terminal and prints what it saw: jobs acknowledged, completed,
lost (acknowledged, never found), stuck (not terminal at the end), duplicates,
restarts and the hostile requests' answers. Not a test; all traffic stays on
127.0.0.1 and it stops by itself. On PostgreSQL it uses a throwaway database.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines
from stop_load import SlowPeer, python_runs, serve_config, serve_env

from hipq.commands.bench import BenchOptions, ServeProcess, _free_port, fresh_database
from tests.peers import serve_app

QUEUES = ("py", "http")
STATES = ("scheduled", "running", "awaiting", "completed", "failed", "cancelled")
GRACE = "5s"


class Soak:
    def __init__(self, workdir: Path, url: str, peer: SlowPeer, peer_url: str, seed: int):
        self.rng = random.Random(seed)
        self.port = _free_port()
        extra = {"lease_ttl": "3s", "shutdown_grace": GRACE}
        self.config = serve_config(url, self.port, peer_url, **extra)
        # A callback the peer gave up on: the attempt times out and is sent again.
        self.config["job_types"]["order"]["timeout"] = "60s"
        self.workdir, self.peer = workdir, peer
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.serve: ServeProcess | None = None
        self.serial = itertools.count()
        self.acked: dict[int, str] = {}  # job id -> type
        self.post_failures = 0
        self.restarts: Counter[str] = Counter()
        self.hostile: Counter[str] = Counter()

    async def start_server(self) -> None:
        self.serve = ServeProcess(self.workdir, self.config, f"serve-{next(self.serial)}")
        self.serve.spawn()
        await self.serve.wait_ready(within=90)

    # -- the three loops --------------------------------------------------------------

    async def load(self, until: float) -> None:
        async with httpx.AsyncClient(base_url=self.base_url, timeout=10) as client:
            while time.monotonic() < until:
                jobs = [self._job() for _ in range(self.rng.randint(1, 8))]
                try:
                    response = await client.post("/v1/jobs/batch", json={"jobs": jobs})
                    response.raise_for_status()
                    for job, ref in zip(jobs, response.json()["jobs"], strict=True):
                        self.acked[ref["id"]] = job["type"]
                except httpx.HTTPError:
                    self.post_failures += 1  # not acknowledged: the client would retry
                await asyncio.sleep(self.rng.uniform(0.05, 0.3))

    def _job(self) -> dict[str, Any]:
        kind = self.rng.choice(["work", "work", "fetch", "order"])
        n = next(self.serial)
        return {"type": kind, "payload": {"key": f"k{n}", "ms": self.rng.randint(50, 500)}}

    async def chaos(self, until: float) -> None:
        while True:
            await asyncio.sleep(self.rng.uniform(8, 20))
            if time.monotonic() >= until:
                return
            assert self.serve is not None and self.serve.process is not None
            how = self.rng.choice([signal.SIGKILL, signal.SIGTERM])
            self.serve.process.send_signal(how)
            # SIGTERM waits for the jobs in flight, at most the grace.
            await asyncio.to_thread(self.serve.process.wait, 60)
            self.restarts[how.name] += 1
            await self.start_server()

    async def hostile_client(self, until: float) -> None:
        deep = b'{"type":"work","payload":{"a":' + b"[" * 300 + b"]" * 300 + b"}}"
        probes: list[tuple[str, str, str, bytes]] = [
            ("bad json", "POST", "/v1/jobs", b'{"type": "work", "payload": {'),
            ("huge int", "POST", "/v1/jobs", b'{"type":"work","payload":{"n":' + b"9" * 30 + b"}}"),
            ("huge float", "POST", "/v1/jobs", b'{"type":"work","payload":{"n":1e400}}'),
            ("unknown type", "POST", "/v1/jobs", b'{"type":"no-such-type"}'),
            ("deep nesting", "POST", "/v1/jobs", deep),
            ("not an object", "POST", "/v1/jobs/batch", b'"jobs"'),
            ("bad cursor", "GET", "/v1/jobs?cursor=" + "9" * 40, b""),
            ("unknown callback", "POST", "/v1/callbacks/no-such-key?type=order", b'{"x":1}'),
        ]
        async with httpx.AsyncClient(base_url=self.base_url, timeout=10) as client:
            while time.monotonic() < until:
                what, method, path, body = self.rng.choice(probes)
                headers = {"content-type": "application/json"}
                try:
                    response = await client.request(method, path, content=body, headers=headers)
                    self.hostile[f"{what}: {response.status_code}"] += 1
                except httpx.HTTPError:
                    self.hostile["(server down)"] += 1
                await asyncio.sleep(self.rng.uniform(0.1, 0.5))

    # -- the check --------------------------------------------------------------------

    async def states(self, client: httpx.AsyncClient) -> dict[int, str]:
        found: dict[int, str] = {}
        for state in STATES:
            params: dict[str, Any] = {"state": state, "limit": 1000}
            while True:
                page = (await client.get("/v1/jobs", params=params)).raise_for_status().json()
                found.update((j["id"], state) for j in page["jobs"])
                if page["next_cursor"] is None:
                    break
                params["cursor"] = page["next_cursor"]
        return found

    async def settle(self, within: float) -> dict[int, str]:
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(base_url=self.base_url, timeout=30) as client:
            while True:
                found = await self.states(client)
                open_ = [j for j in self.acked if found.get(j) in STATES[:3]]
                if not open_ or time.monotonic() > deadline:
                    return found
                await asyncio.sleep(1)


async def soak(engine: str, opts: BenchOptions, minutes: float, seed: int) -> None:
    with tempfile.TemporaryDirectory(prefix="hipq-soak-") as tmp:
        workdir = Path(tmp)
        runs_file = workdir / "runs.txt"
        serve_env(runs_file)
        peer = SlowPeer(seed=seed)
        async with (
            serve_app(peer.app) as peer_url,
            fresh_database(engine, opts, workdir, "soak") as url,
        ):
            run = Soak(workdir, url, peer, peer_url, seed)
            await run.start_server()
            started = time.monotonic()
            until = started + minutes * 60
            try:
                await asyncio.gather(run.load(until), run.chaos(until), run.hostile_client(until))
                found = await run.settle(within=180)
            finally:
                if run.serve is not None:
                    run.serve.stop()
                await peer.close()
        report(engine, run, found, python_runs(runs_file), time.monotonic() - started)


def report(
    engine: str, run: Soak, found: dict[int, str], runs: Counter[int], seconds: float
) -> None:
    acked = run.acked
    final = Counter(found.get(j, "lost") for j in acked)
    stuck = sum(final[s] for s in STATES[:3])
    py_dup = sum(c - 1 for j, c in runs.items() if c > 1 and j in acked)
    http_dup = sum(c - 1 for c in run.peer.requests.values() if c > 1)
    print(f"soak on {engine}: {seconds:.0f}s")
    print(f"  jobs acknowledged {len(acked)} ({Counter(acked.values())})")
    print(f"  completed {final['completed']}, failed {final['failed']}, lost {final['lost']},")
    print(f"  stuck (not terminal at the end) {stuck}")
    print(f"  duplicates: {py_dup} python runs, {http_dup} HTTP requests")
    print(f"  restarts: {dict(run.restarts)}; posts not acknowledged: {run.post_failures}")
    print(f"  callbacks the peer gave up on: {run.peer.callbacks_failed}")
    print(f"  hostile requests: {sum(run.hostile.values())}")
    for what, count in sorted(run.hostile.items()):
        print(f"    {what}: {count}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.set_defaults(engine="sqlite")
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    for engine in engines:
        await soak(engine, opts, args.minutes, args.seed)


if __name__ == "__main__":
    asyncio.run(main())
