"""How long one tenant waits behind another tenant's backlog (prints figures, asserts
nothing).

    python benchmarks/bench_key_backlog.py --engine both

100,000 jobs of tenant A are due first, then 10 jobs of tenant B; every job sleeps
50 ms; capacity 50, batches of 1,000. Three queues of the same jobs:

- `order`: the queue order alone (the baseline: B's jobs are behind A's backlog);
- `per_key`: `per_key {key: labels.tenant, limit: 25}`;
- `round_robin`: `round_robin_label: tenant`.

The figures: when B's first job started and B's last one ended, counted from the
start of the drain, and how many of A's jobs started before B's first. The baseline
is stopped after CAP seconds: B would wait for A's whole backlog (100,000 x 50 ms /
50 = 100 s).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines

from hipq.commands.bench import fresh_database, utcnow
from hipq.config import load_settings
from hipq.jobs import NewJob
from hipq.service import Service
from hipq.store import Store

A, B, SECONDS, CAP = 100_000, 10, 0.05, 20.0
QUEUES: dict[str, dict[str, Any]] = {
    "order": {},
    "per_key": {"throttlers": [{"per_key": {"key": "labels.tenant", "limit": 25}}]},
    "round_robin": {"round_robin_label": "tenant"},
}


async def backlog(url: str, queue: str) -> dict[int, str]:
    store = Store.from_url(url)
    now = utcnow()
    tenants: dict[int, str] = {}
    try:
        for tenant, count, at in (("A", A, now), ("B", B, now + timedelta(0, 1e-3))):
            for first in range(0, count, 5_000):
                new = [
                    NewJob(
                        type="sleep",
                        queue=queue,
                        payload={"seconds": SECONDS},
                        run_at=at,
                        labels={"tenant": tenant},
                        retry={"strategy": "none"},
                    )
                    for _ in range(first, min(count, first + 5_000))
                ]
                for job in (await store.job_insert_many(new, now)).jobs:
                    tenants[job.id] = tenant
    finally:
        await store.close()
    return tenants


async def drain(url: str, queue: str, tenants: dict[int, str]) -> dict[str, Any]:
    settings = load_settings(
        None,
        database_url=url,
        log_level="warning",
        queues={queue: {"concurrency": 50, "batch_size": 1000, **QUEUES[queue]}},
        job_types={
            "sleep": {"queue": queue, "transport": {"python": {"handler": "hipq.handlers:sleep"}}}
        },
    )
    service = Service(settings)
    out: dict[str, Any] = {"a_before_b": 0, "b_first": None, "b_done": None}
    b_left = B
    done = asyncio.Event()
    started = time.perf_counter()

    def watch(name: str, fields: dict[str, Any]) -> None:
        nonlocal b_left
        if name == "jobs_admitted":
            for job in fields["jobs"]:
                if tenants.get(job.id) == "B" and out["b_first"] is None:
                    out["b_first"] = time.perf_counter() - started
                elif tenants.get(job.id) == "A" and out["b_first"] is None:
                    out["a_before_b"] += 1
        elif name == "job_settled" and tenants.get(fields["job_id"]) == "B":
            b_left -= 1
            if b_left == 0:
                out["b_done"] = time.perf_counter() - started
                done.set()

    service.events.subscribe(watch)
    await service.start()
    try:
        await asyncio.wait_for(done.wait(), timeout=CAP)
    except TimeoutError:
        pass
    finally:
        service.begin_stop(grace=1)
        await service.stop()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    print(
        f"{A:,} jobs of tenant A, then {B} of tenant B, {SECONDS * 1000:.0f} ms each;"
        f" capacity 50, batches of 1,000; stopped after {CAP:g}s"
    )
    with tempfile.TemporaryDirectory(prefix="hipq-bench-keys-") as tmp:
        for engine in engines:
            for queue in QUEUES:
                async with fresh_database(engine, opts, Path(tmp), f"keys-{engine}") as url:
                    tenants = await backlog(url, queue)
                    got = await drain(url, queue, tenants)

                def shown(seconds: float | None) -> str:
                    return f"{seconds:6.2f}s" if seconds is not None else f"  >{CAP:g}s"

                print(
                    f"  {engine:<8} {queue:<12} B's first job started after"
                    f" {shown(got['b_first'])} ({got['a_before_b']:,} of A's before it),"
                    f" B's last done after {shown(got['b_done'])}",
                    flush=True,
                )


if __name__ == "__main__":
    asyncio.run(main())
