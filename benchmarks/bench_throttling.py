"""What a throttler chain costs the loop (prints figures, asserts nothing).

    python benchmarks/bench_throttling.py --engine both --jobs 100000

Drains the same backlog of no-op python jobs twice, on a fresh database each time:
once with no throttlers, once with the chain share + rate + window, set so that the
chain computes on every candidate but does not hold jobs back (shares with lending
over a large capacity, a rate far above the drain rate, an always-open window on
every job). The difference is the chain's own cost. Target: under 20 % at batches
of 1,000.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines

from hipq.commands.bench import fresh_database, utcnow
from hipq.config import load_settings
from hipq.jobs import NewJob
from hipq.service import Service
from hipq.store import Store

REGIONS = ("east", "north", "west")
WINDOW = [{"start": "00:00", "end": "23:59:59", "tz": "Europe/Berlin"}]
CHAIN = [
    {
        "share": {
            "label": "region",
            "shares": {"east": 40, "north": 30, "west": 30},
            "lend": True,
            "capacity": 1_000_000,
        }
    },
    {"rate": {"limit": 10_000_000, "per": "1s", "label": "region"}},
    {"window": {}},
]


async def backlog(url: str, count: int) -> None:
    store = Store.from_url(url)
    rng = random.Random(5)
    now = utcnow()
    try:
        for first in range(0, count, 10_000):
            await store.job_insert_many(
                [
                    NewJob(
                        type="noop",
                        queue="default",
                        payload={},
                        run_at=now,
                        labels={"region": rng.choice(REGIONS)},
                        windows=WINDOW,
                        retry={"strategy": "exponential"},
                    )
                    for _ in range(first, min(count, first + 10_000))
                ],
                now,
            )
    finally:
        await store.close()


async def drain(url: str, count: int, throttlers: list[dict[str, Any]]) -> float:
    settings = load_settings(
        None,
        database_url=url,
        log_level="warning",
        queues={
            "default": {
                "batch_size": 1000,
                "batch_interval": "1s",
                "throttlers": throttlers,
            }
        },
        job_types={"noop": {"transport": {"python": {"handler": "hipq.handlers:noop"}}}},
    )
    service = Service(settings)
    done = 0
    finished = asyncio.Event()

    def count_settled(name: str, fields: dict[str, Any]) -> None:
        nonlocal done
        if name == "job_settled":
            done += 1
            if done >= count:
                finished.set()

    service.events.subscribe(count_settled)
    started = time.perf_counter()
    await service.start()
    try:
        await asyncio.wait_for(finished.wait(), timeout=1800)
    finally:
        await service.stop()
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    print(f"drain of {args.jobs} no-op jobs, batches of 1,000; target: chain costs < 20 %")
    with tempfile.TemporaryDirectory(prefix="hipq-bench-thr-") as tmp:
        for engine in engines:
            rates = {}
            for name, chain in (("no throttlers", []), ("share+rate+window", CHAIN)):
                async with fresh_database(engine, opts, Path(tmp), f"thr-{engine}") as url:
                    await backlog(url, args.jobs)
                    seconds = await drain(url, args.jobs, chain)
                rates[name] = args.jobs / seconds
                print(f"  {engine:<8} {name:<20} {rates[name]:>9,.0f} jobs/s", flush=True)
            cost = 1 - rates["share+rate+window"] / rates["no throttlers"]
            print(f"  {engine:<8} chain cost {cost:>6.1%}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
