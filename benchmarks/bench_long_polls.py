"""How late ``GET /v1/jobs/{id}?wait=`` answers (prints figures, asserts nothing).

    python benchmarks/bench_long_polls.py --engine both --waiters 1 300 1000

Per engine and number of waiters, a ``hipq serve``-like Service (its loops running)
and one request per job through the ASGI app (no network; nothing leaves 127.0.0.1):

- job end: every job is held by a python handler; the requests wait ``--wait``
  seconds, the handlers are released after ``--hold`` seconds, and each answer's
  lateness is measured from the moment its job settled (the core's ``job_settled``
  event, after the commit) to the moment the client has the answer;
- deadline: every job is scheduled far ahead, so none finishes; each answer's
  lateness is measured from the request's start plus its wait.

Printed: median, p99 and max lateness in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from engines import add_engine_options, chosen_engines

from hipq.api.app import create_app
from hipq.commands.bench import fresh_database
from hipq.config import load_settings
from hipq.service import Service

RELEASE = asyncio.Event()


async def held(job: Any) -> dict[str, Any]:
    """The benchmark's handler: in flight until the script releases every job."""
    await RELEASE.wait()
    return {"ok": True}


async def until(check: Any, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("the benchmark did not reach its state in time")
        await asyncio.sleep(0.02)


def figures(lateness: list[float]) -> str:
    ms = sorted(x * 1000 for x in lateness)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"median {statistics.median(ms):7.1f}  p99 {p99:7.1f}  max {ms[-1]:7.1f} ms"


async def measure(url: str, waiters: int, wait: float, hold: float) -> tuple[str, str]:
    RELEASE.clear()
    settings = load_settings(
        None,
        database_url=url,
        log_level="warning",
        queues={"default": {"batch_size": max(waiters, 10), "batch_interval": "1s"}},
        job_types={"held": {"transport": {"python": {"handler": "__main__:held"}}}},
    )
    service = Service(settings)
    settled: dict[int, float] = {}

    def on_event(name: str, fields: dict[str, Any]) -> None:
        if name == "job_settled":
            settled.setdefault(int(fields["job_id"]), time.perf_counter())

    service.events.subscribe(on_event)
    await service.start()
    app = create_app(service, manage_service=False)
    try:
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://127.0.0.1", timeout=wait + 60
        ) as client:

            async def answered(job_id: int) -> tuple[float, str]:
                got = await client.get(f"/v1/jobs/{job_id}", params={"wait": f"{wait}s"})
                return time.perf_counter(), str(got.json()["state"])

            # Job end: the handlers hold every job until released.
            posted = await client.post(
                "/v1/jobs/batch", json={"jobs": [{"type": "held"}] * waiters}
            )
            ids = [j["id"] for j in posted.json()["jobs"]]
            python = next(iter(service.transports.values()))
            await until(lambda: python.busy >= waiters)
            tasks = [asyncio.create_task(answered(i)) for i in ids]
            await asyncio.sleep(hold)
            RELEASE.set()
            done = await asyncio.gather(*tasks)
            ended = [at - settled[i] for i, (at, state) in zip(ids, done, strict=True)]
            assert all(state == "completed" for _, state in done), "a stale answer"

            # Deadline: jobs that will not finish within the wait.
            far = [{"type": "held", "run_at": "2099-01-01T00:00:00Z"}] * waiters
            posted = await client.post("/v1/jobs/batch", json={"jobs": far})
            ids = [j["id"] for j in posted.json()["jobs"]]
            starts = [time.perf_counter()] * len(ids)
            done = await asyncio.gather(*(answered(i) for i in ids))
            late = [at - (s + wait) for s, (at, _) in zip(starts, done, strict=True)]
    finally:
        RELEASE.set()
        await service.stop()
    return figures(ended), figures(late)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--waiters", type=int, nargs="+", default=[1, 300, 1000])
    parser.add_argument("--wait", type=float, default=10.0, help="seconds each request waits")
    parser.add_argument("--hold", type=float, default=3.0, help="seconds until jobs end")
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    with tempfile.TemporaryDirectory(prefix="hipq-bench-long-polls-") as tmp:
        for engine in engines:
            for n in args.waiters:
                name = f"long-polls-{engine}-{n}"
                async with fresh_database(engine, opts, Path(tmp), name) as url:
                    ended, late = await measure(url, n, args.wait, args.hold)
                print(f"  {engine:<8} {n:>5,} waiters  after job end: {ended}", flush=True)
                print(f"  {'':<8} {'':>13}  after deadline: {late}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
