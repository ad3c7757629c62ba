"""End-to-end throughput and latency of external jobs (prints figures, asserts nothing).

    python benchmarks/bench_external.py --engine both --path both --jobs 20000

- http: `hipq serve` (a subprocess) sends each job to a local HTTP service that answers
  202 at once and then calls the callback URL back; the job completes by the callback.
- kafka: `hipq serve` produces each job to a request topic of a local Tansu broker; a
  responder consumes it and produces the response, which hipq consumes and matches.

Latency is from the job's creation (the POST) to its `completed` (both stamped by hipq),
median and p99 over all jobs. Every wait is bounded; all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from sqlalchemy import select

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines

from hipq.commands.bench import _free_port, cpu_seconds, fresh_database, serving
from hipq.store import Store
from hipq.store.schema import jobs
from tests.peers import CallbackService, serve_app
from tests.services import start_tansu

TARGET = ">= 2,000 jobs/s completed (PostgreSQL)"


def base_config(url: str, port: int, concurrency: int) -> dict[str, Any]:
    return {
        "database_url": url,
        "migrate_on_start": True,
        "log_level": "warning",
        "server": {"host": "127.0.0.1", "port": port},
        # A capacity (requests outstanding at once), as a deployment sets to protect its peer.
        "queues": {
            "default": {
                "batch_size": 2000,
                "batch_interval": "200ms",
                "concurrency": concurrency,
            }
        },
        "responses": {"ttl": "1h"},
    }


async def post_jobs(base: str, type_: str, count: int, batch: int = 1000) -> float:
    """POST ``count`` jobs in batches; returns the time the first POST started."""
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        for first in range(0, count, batch):
            body = {
                "jobs": [
                    {"type": type_, "payload": {"order_id": f"o-{i}"}}
                    for i in range(first, min(count, first + batch))
                ]
            }
            response = await client.post(
                "/v1/jobs/batch",
                content=orjson.dumps(body),
                headers={"content-type": "application/json"},
            )
            response.raise_for_status()
    return started


async def wait_drained(base: str, count: int, within: float) -> float:
    deadline = time.perf_counter() + within
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        while time.perf_counter() < deadline:
            q = (await client.get("/v1/queues/default")).json()
            if q["scheduled"] + q["running"] + q["awaiting"] == 0:
                return time.perf_counter()
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{count} jobs not drained within {within:g}s")


async def latencies(url: str) -> tuple[int, float, float]:
    store = Store.from_url(url)
    try:
        async with store.engine.connect() as conn:
            rows = (
                await conn.execute(select(jobs.c.state, jobs.c.created_at, jobs.c.finished_at))
            ).all()
    finally:
        await store.close()
    done = sorted(
        (r.finished_at - r.created_at).total_seconds() * 1000
        for r in rows
        if r.state == "completed"
    )
    if not done:
        return 0, 0.0, 0.0
    return len(done), done[len(done) // 2], done[min(len(done) - 1, int(len(done) * 0.99))]


@dataclass(frozen=True)
class Run:
    seconds: float  # from the first POST to the last job completed
    count: int
    cpu: float  # utime + stime of `hipq serve` over the same span (/proc)


async def run_http(url: str, workdir: Path, count: int, concurrency: int) -> Run:
    peer = CallbackService(delay=(0.0, 0.0))
    async with serve_app(peer.app) as external:
        config = base_config(url, _free_port(), concurrency)
        config["job_types"] = {
            "charge": {
                "correlation_key": "{payload.order_id}",
                "transport": {"http": {"url": f"{external}/charges", "timeout": "30s"}},
            }
        }
        async with serving(workdir, config, "http") as serve:
            cpu = cpu_seconds(serve.pid)
            started = await post_jobs(serve.base_url, "charge", count)
            ended = await wait_drained(serve.base_url, count, within=600)
            cpu = cpu_seconds(serve.pid) - cpu
    await peer.close()
    return Run(ended - started, count, cpu)


async def responder(bootstrap: str, requests: str, responses: str, stop: asyncio.Event) -> None:
    consumer = AIOKafkaConsumer(
        requests,
        bootstrap_servers=bootstrap,
        group_id="responder",
        auto_offset_reset="earliest",
        session_timeout_ms=1000,
        heartbeat_interval_ms=200,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await consumer.start()
    await producer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=200, max_records=2000)
            for messages in batches.values():
                for m in messages:
                    key = dict(m.headers)["correlation_id"]
                    await producer.send(
                        responses, b'{"status": "ok"}', headers=[("correlation_id", key)]
                    )
            await producer.flush()
    finally:
        await consumer.stop()
        await producer.stop()


async def run_kafka(url: str, workdir: Path, count: int, concurrency: int) -> Run:
    broker = start_tansu()
    suffix = uuid.uuid4().hex[:6]
    requests, responses = f"bench.requests.{suffix}", f"bench.responses.{suffix}"
    stop = asyncio.Event()
    task = asyncio.create_task(responder(broker.bootstrap, requests, responses, stop))
    try:
        config = base_config(url, _free_port(), concurrency)
        config["job_types"] = {
            "order": {
                "correlation_key": "{payload.order_id}",
                "transport": {"kafka": {"topic": requests}},
            }
        }
        config["kafka"] = {
            "enabled": True,
            "bootstrap_servers": broker.bootstrap,
            "group_id": f"hipq-{suffix}",
            "session_timeout": "2s",
            "heartbeat_interval": "500ms",
            "responses": [
                {
                    "topic": responses,
                    "key": "{headers.correlation_id}",
                    "outcome": {"field": "status", "success": ["ok"]},
                }
            ],
        }
        async with serving(workdir, config, "kafka") as serve:
            cpu = cpu_seconds(serve.pid)
            started = await post_jobs(serve.base_url, "order", count)
            ended = await wait_drained(serve.base_url, count, within=600)
            cpu = cpu_seconds(serve.pid) - cpu
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
        broker.stop()
    return Run(ended - started, count, cpu)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--path", choices=["http", "kafka", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=500, help="the queue's capacity")
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    paths = ["http", "kafka"] if args.path == "both" else [args.path]
    runners: dict[str, Callable[[str, Path, int, int], Awaitable[Run]]] = {
        "http": run_http,
        "kafka": run_kafka,
    }
    print(
        f"end to end, {args.jobs} jobs per run, queue concurrency {args.concurrency};"
        f" target {TARGET}"
    )
    with tempfile.TemporaryDirectory(prefix="hipq-bench-ext-") as tmp:
        for engine in engines:
            for path in paths:
                async with fresh_database(engine, opts, Path(tmp), f"{path}-{engine}") as url:
                    run = await runners[path](url, Path(tmp), args.jobs, args.concurrency)
                    done, median, p99 = await latencies(url)
                print(
                    f"  {engine:<8} {path:<6} {run.count / run.seconds:>9,.0f} jobs/s completed   "
                    f"latency median {median:>8,.0f} ms   p99 {p99:>8,.0f} ms   "
                    f"({done}/{run.count} completed in {run.seconds:.1f}s; hipq serve CPU "
                    f"{run.cpu * 1000 / run.count:.2f} ms per job)",
                    flush=True,
                )


if __name__ == "__main__":
    asyncio.run(main())
