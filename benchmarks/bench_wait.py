"""What ``GET /v1/jobs/{id}?wait=`` costs with many waiters (prints figures, asserts nothing).

    python benchmarks/bench_wait.py --engine both --waiters 1000

Per engine, a ``hipq serve``-like Service (its loops running) with ``--waiters`` jobs
in flight, held by a python handler, and one ``?wait=60s`` request per job through
the ASGI app:

- while they wait (``--window`` seconds): the database statements per second of the
  whole process, without and with the waiters, the statements the waiters' own checks
  ran, and the process's CPU use;
- when the handlers are released: how long until every request has its answer, and
  the statements the waiters' checks ran for it.

A client that polled instead would cost one request and one query per waiter per
poll: 1,000 waiters polling each second are 1,000 queries a second.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from engines import add_engine_options, chosen_engines
from sqlalchemy import event

from hipq.app import create_app
from hipq.commands.bench import fresh_database
from hipq.config import load_settings
from hipq.service import Service

RELEASE = asyncio.Event()


async def held(job: Any) -> dict[str, Any]:
    """The benchmark's handler: in flight until the script releases every job."""
    await RELEASE.wait()
    return {"ok": True}


class Statements:
    """Counts the statements a store's engine sends."""

    def __init__(self, service: Service) -> None:
        self.count = 0

        def counted(*_: Any) -> None:
            self.count += 1

        event.listen(service.store.engine.sync_engine, "before_cursor_execute", counted)


async def window(statements: Statements, seconds: float) -> tuple[float, float]:
    """(statements per second, CPU percent of one core) over ``seconds``."""
    before, cpu, t = statements.count, time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    wall = time.perf_counter() - t
    return (statements.count - before) / wall, (time.process_time() - cpu) / wall * 100


async def until(check: Any, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("the benchmark did not reach its state in time")
        await asyncio.sleep(0.05)


async def measure(url: str, waiters: int, seconds: float) -> dict[str, float]:
    RELEASE.clear()
    settings = load_settings(
        None,
        database_url=url,
        log_level="warning",
        queues={"default": {"batch_size": waiters, "batch_interval": "1s"}},
        job_types={"held": {"transport": {"python": {"handler": "__main__:held"}}}},
    )
    service = Service(settings)
    await service.start()
    app = create_app(service, manage_service=False)
    statements = Statements(service)
    out: dict[str, float] = {}
    try:
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", timeout=120
        ) as client:
            jobs = [{"type": "held"} for _ in range(waiters)]
            posted = await client.post("/v1/jobs/batch", json={"jobs": jobs})
            ids = [j["id"] for j in posted.json()["jobs"]]
            python = next(iter(service.transports.values()))
            await until(lambda: python.busy >= waiters)
            out["base_qps"], out["base_cpu"] = await window(statements, seconds)

            async def wait(job_id: int) -> str:
                answer = await client.get(f"/v1/jobs/{job_id}", params={"wait": "60s"})
                return str(answer.json()["state"])

            tasks = [asyncio.create_task(wait(i)) for i in ids]
            # Every waiter has done its first read (its job's queue is noted after it).
            await until(lambda: len(service.waiters._queue_of) >= waiters)
            await asyncio.sleep(0.2)
            checks = service.waiters.checks
            out["wait_qps"], out["wait_cpu"] = await window(statements, seconds)
            out["check_qps"] = (service.waiters.checks - checks) / seconds
            checks = service.waiters.checks
            t = time.perf_counter()
            RELEASE.set()
            states = await asyncio.gather(*tasks)
            out["answered_s"] = time.perf_counter() - t
            out["wake_checks"] = service.waiters.checks - checks
            out["completed"] = sum(1 for s in states if s == "completed")
    finally:
        RELEASE.set()
        await service.stop()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--window", type=float, default=10.0, help="seconds measured idle")
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    with tempfile.TemporaryDirectory(prefix="hipq-bench-wait-") as tmp:
        for engine in engines:
            async with fresh_database(engine, opts, Path(tmp), f"wait-{engine}") as url:
                r = await measure(url, args.waiters, args.window)
            print(
                f"  {engine:<8} {args.waiters:,} jobs in flight: "
                f"{r['base_qps']:5.1f} statements/s, CPU {r['base_cpu']:4.1f}% without waiters;"
                f" {r['wait_qps']:5.1f} statements/s, CPU {r['wait_cpu']:4.1f}% with"
                f" {args.waiters:,} waiting (their checks: {r['check_qps']:.2f}/s)\n"
                f"  {'':<8} released: {int(r['completed']):,} answered `completed` in"
                f" {r['answered_s']:.2f}s, with {int(r['wake_checks'])} shared checks",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
