"""Duplicates per SIGTERM: how much work a stop of `hipq serve` makes run twice.

    python benchmarks/bench_stop.py --engine sqlite --runs 3

Each run posts 200 python jobs (200-500 ms each, 20 at a time) and 100 HTTP jobs
against a slow local peer (it answers after 300-800 ms, 10 at a time), sends SIGTERM
once a third of them completed, restarts `hipq serve` on the same database and waits
until every job is terminal. A python job that ran twice, or an HTTP request the peer
received twice, is a duplicate. Prints figures, asserts nothing; every wait is bounded
and all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines
from stop_load import SlowPeer, completed_count, open_jobs, python_runs, serve_config, serve_env

from hipq.commands.bench import BenchOptions, ServeProcess, _free_port, fresh_database
from tests.peers import serve_app

PYTHON_JOBS, HTTP_JOBS = 200, 100
QUEUES = ("py", "http")


async def wait_done(client: httpx.AsyncClient, total: int, done: int, within: float) -> None:
    """Poll until at least ``done`` of the ``total`` jobs left the open states."""
    deadline = time.monotonic() + within
    while True:
        counts = await open_jobs(client, QUEUES)
        still_open = counts["scheduled"] + counts["running"] + counts["awaiting"]
        if total - still_open >= done:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"not {done} jobs done within {within:g}s: {counts}")
        await asyncio.sleep(0.05)


async def one_run(engine: str, opts: BenchOptions, workdir: Path, n: int) -> dict[str, float]:
    rng = random.Random(n)
    runs_file = workdir / f"runs-{engine}-{n}.txt"
    serve_env(runs_file)
    peer = SlowPeer(seed=n)
    total = PYTHON_JOBS + HTTP_JOBS
    async with (
        serve_app(peer.app) as peer_url,
        fresh_database(engine, opts, workdir, f"stop-{n}") as url,
    ):
        first = ServeProcess(workdir, serve_config(url, _free_port(), peer_url), f"first-{n}")
        first.spawn()
        try:
            await first.wait_ready()
            async with httpx.AsyncClient(base_url=first.base_url, timeout=30) as client:
                jobs = [
                    {"type": "work", "payload": {"ms": rng.randint(200, 500)}}
                    for _ in range(PYTHON_JOBS)
                ]
                jobs += [
                    {"type": "fetch", "payload": {"key": f"f{i}", "ms": rng.randint(300, 800)}}
                    for i in range(HTTP_JOBS)
                ]
                (await client.post("/v1/jobs/batch", json={"jobs": jobs})).raise_for_status()
                await wait_done(client, total, total // 3, 60)
            first.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            signalled = time.monotonic()
            await asyncio.to_thread(first.process.wait, 60)  # type: ignore[union-attr]
            stop_seconds = time.monotonic() - signalled
            ran_before = len(python_runs(runs_file))
            sent_before = sum(peer.requests.values())
        finally:
            first.stop()
        second = ServeProcess(workdir, serve_config(url, _free_port(), peer_url), f"second-{n}")
        second.spawn()
        try:
            await second.wait_ready()
            async with httpx.AsyncClient(base_url=second.base_url, timeout=30) as client:
                await wait_done(client, total, total, 120)
                completed = sum([await completed_count(client, t) for t in ("work", "fetch")])
        finally:
            second.stop()
        await peer.close()
    runs = python_runs(runs_file)
    return {
        "stop_s": stop_seconds,
        "python_dup": sum(c - 1 for c in runs.values() if c > 1),
        "http_dup": sum(c - 1 for c in peer.requests.values() if c > 1),
        "python_runs_before": ran_before,
        "http_sent_before": sent_before,
        "completed": completed,
        "lost": total - completed,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    with tempfile.TemporaryDirectory(prefix="hipq-stop-") as tmp:
        for engine in engines:
            for n in range(args.runs):
                r = await one_run(engine, opts, Path(tmp), n)
                print(
                    f"{engine} run {n + 1}: SIGTERM to exit {r['stop_s']:.1f}s;"
                    f" duplicates: {r['python_dup']:.0f} python, {r['http_dup']:.0f} http"
                    f" (of {r['python_runs_before']:.0f} python runs and"
                    f" {r['http_sent_before']:.0f} requests before the stop);"
                    f" completed {r['completed']:.0f}, lost {r['lost']:.0f}",
                    flush=True,
                )


if __name__ == "__main__":
    asyncio.run(main())
