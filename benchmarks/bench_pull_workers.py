"""Pull workers: jobs/s through one and through four ``hipq worker`` processes, and the
latency from a job's POST to its handler's start with a worker waiting (prints
figures, asserts nothing).

    python benchmarks/bench_pull_workers.py --engine both --jobs 2000 --latency 50

Per engine, one ``hipq serve`` subprocess on 127.0.0.1 and ``hipq worker``
subprocesses running ``noop`` (below), as workers on other machines would:

- throughput: ``--jobs`` jobs posted in batches of 500 to a queue of concurrency 200,
  each worker fetching up to 50 at once; from the first POST to the last job
  completed (read from the database), with the ``hipq serve`` process's CPU seconds
  (user + system) over the same span divided by the jobs;
- latency: one idle worker waits in its fetch (a long poll); jobs are posted one at a
  time, each after the previous completed, and the handler notes when it starts.

Wall clock times are compared across processes of one machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
import psutil
import yaml
from engines import add_engine_options, chosen_engines
from sqlalchemy import func, select

from hipq.commands.bench import fresh_database
from hipq.store import Store
from hipq.store.schema import jobs

HERE = Path(__file__).resolve().parent
HIPQ = Path(sys.executable).with_name("hipq")
STARTS_ENV = "BENCH_PULL_STARTS"


async def noop(job: Any) -> None:
    """The workers' handler: notes its start (job id, wall clock) and returns."""
    path = os.environ.get(STARTS_ENV)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{job.id} {time.time():.6f}\n".encode())
        finally:
            os.close(fd)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(starts: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent)])
    if starts is not None:
        env[STARTS_ENV] = str(starts)
    return env


def start_server(url: str, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = {
        "database_url": url,
        "log_level": "warning",
        "queues": {"default": {"concurrency": 200, "batch_interval": "1s", "batch_size": 1000}},
        "job_types": {"bench": {"transport": "pull"}},
    }
    path = tmp / "hipq.yaml"
    path.write_text(yaml.safe_dump(config))
    log = open(tmp / "serve.log", "ab")  # kept open for the server's life
    process = subprocess.Popen(
        [str(HIPQ), "serve", "--config", str(path), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=environment(),
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return process, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("hipq serve did not become ready")


def start_workers(
    base: str, count: int, concurrency: int, starts: Path
) -> list[subprocess.Popen[bytes]]:
    command = [str(HIPQ), "worker", "--types", "bench", "--handler", "bench_pull_workers:noop"]
    command += ["--url", base, "--wait", "10", "--concurrency", str(concurrency)]
    return [
        subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment(starts)
        )
        for _ in range(count)
    ]


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for p in processes:
        p.send_signal(signal.SIGTERM)
    for p in processes:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()


async def completed(store: Store) -> int:
    async with store.engine.connect() as conn:
        query = select(func.count()).select_from(jobs).where(jobs.c.state == "completed")
        return int((await conn.execute(query)).scalar_one())


async def until_completed(store: Store, count: int, limit: float = 600) -> None:
    deadline = time.monotonic() + limit
    while await completed(store) < count:
        if time.monotonic() > deadline:
            raise RuntimeError("the jobs did not complete in time")
        await asyncio.sleep(0.02)


def started_at(starts: Path, job_id: int) -> float | None:
    if not starts.exists():
        return None
    for line in starts.read_text().splitlines():
        got, at = line.split()
        if int(got) == job_id:
            return float(at)
    return None


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def throughput(
    base: str, server: psutil.Process, store: Store, tmp: Path, workers: int, count: int
) -> tuple[float, float]:
    """Jobs/s, and the server's CPU seconds per job over the same span."""
    done_before = await completed(store)
    procs = start_workers(base, workers, 50, tmp / f"starts-{workers}.txt")
    try:
        await asyncio.sleep(3)  # the workers' imports, then their first (waiting) fetch
        async with httpx.AsyncClient(base_url=base, timeout=120) as client:
            began, cpu_began = time.perf_counter(), cpu_seconds(server)
            for first in range(0, count, 500):
                batch = [{"type": "bench"}] * min(500, count - first)
                posted = await client.post("/v1/jobs/batch", json={"jobs": batch})
                posted.raise_for_status()
            await until_completed(store, done_before + count)
            took = time.perf_counter() - began
            cpu = cpu_seconds(server) - cpu_began
    finally:
        stop(procs)
    return count / took, cpu / count


async def latency(base: str, store: Store, tmp: Path, count: int) -> list[float]:
    starts = tmp / "starts-latency.txt"
    procs = start_workers(base, 1, 1, starts)
    out = []
    try:
        await asyncio.sleep(3)
        async with httpx.AsyncClient(base_url=base, timeout=120) as client:
            for _ in range(count):
                done_before = await completed(store)
                await asyncio.sleep(0.2)  # the worker back in its waiting fetch
                sent = time.time()
                posted = await client.post("/v1/jobs", json={"type": "bench"})
                posted.raise_for_status()
                job_id = posted.json()["id"]
                await until_completed(store, done_before + 1)
                at = started_at(starts, job_id)
                if at is not None:
                    out.append(at - sent)
    finally:
        stop(procs)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--latency", type=int, default=50, help="jobs posted one at a time")
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    for engine in engines:
        with tempfile.TemporaryDirectory(prefix="hipq-bench-pull-") as tmp_name:
            tmp = Path(tmp_name)
            async with fresh_database(engine, opts, tmp, f"pull-{engine}") as url:
                server, base = start_server(url, tmp)
                store = Store.from_url(url)
                try:
                    for workers in (1, 4):
                        rate, cpu = await throughput(
                            base, psutil.Process(server.pid), store, tmp, workers, args.jobs
                        )
                        print(
                            f"  {engine:<8} {workers} worker(s)  {args.jobs:,} jobs: "
                            f"{rate:8.0f} jobs/s  server CPU {cpu * 1000:6.3f} ms/job",
                            flush=True,
                        )
                    waits = sorted(x * 1000 for x in await latency(base, store, tmp, args.latency))
                    p90 = waits[min(len(waits) - 1, int(len(waits) * 0.9))]
                    print(
                        f"  {engine:<8} POST to handler start, a worker waiting: median "
                        f"{statistics.median(waits):6.1f}  p90 {p90:6.1f}  max {waits[-1]:6.1f} ms",
                        flush=True,
                    )
                finally:
                    await store.close()
                    stop([server])


if __name__ == "__main__":
    asyncio.run(main())
