"""How long a share waits behind another share's backlog (prints figures, asserts nothing).

    python benchmarks/bench_share_backlog.py --engine both

A queue of capacity 100 split into two strict shares, east 50 % and west 50 %, with
batches of 1,000. First 10,000 east jobs are posted, then 1,000 west jobs behind
them; every job sleeps 100 ms. East can run only 50 at a time, so its backlog stays
at the front of the queue far longer than one batch. The figures are when the last
west job and the last east job completed, counted from the start of the drain:
west should finish in about 1,000 / 50 x 0.1 s = 2 s plus overhead, not after
east's backlog.
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

EAST, WEST, SECONDS = 10_000, 1_000, 0.1


async def backlog(url: str) -> dict[int, str]:
    """The jobs, east first; their ids and regions."""
    store = Store.from_url(url)
    now = utcnow()
    regions: dict[int, str] = {}
    try:
        for region, count, at in (("east", EAST, now), ("west", WEST, now + timedelta(0, 1e-3))):
            for first in range(0, count, 5_000):
                new = [
                    NewJob(
                        type="sleep",
                        queue="default",
                        payload={"seconds": SECONDS},
                        run_at=at,
                        labels={"region": region},
                        retry={"strategy": "none"},
                    )
                    for _ in range(first, min(count, first + 5_000))
                ]
                for job in (await store.job_insert_many(new, now)).jobs:
                    regions[job.id] = region
    finally:
        await store.close()
    return regions


async def drain(url: str, regions: dict[int, str]) -> dict[str, float]:
    settings = load_settings(
        None,
        database_url=url,
        log_level="warning",
        queues={
            "default": {
                "concurrency": 100,
                "batch_size": 1000,
                "batch_interval": "1s",
                "throttlers": [{"share": {"label": "region", "shares": {"east": 50, "west": 50}}}],
            }
        },
        job_types={"sleep": {"transport": {"python": {"handler": "hipq.handlers:sleep"}}}},
    )
    service = Service(settings)
    left = {"east": EAST, "west": WEST}
    finished_at: dict[str, float] = {}
    all_done = asyncio.Event()
    started = time.perf_counter()

    def count(name: str, fields: dict[str, Any]) -> None:
        if name != "job_settled":
            return
        region = regions.get(fields["job_id"])
        if region is None:
            return
        left[region] -= 1
        if left[region] == 0:
            finished_at[region] = time.perf_counter() - started
            if len(finished_at) == len(left):
                all_done.set()

    service.events.subscribe(count)
    await service.start()
    try:
        await asyncio.wait_for(all_done.wait(), timeout=600)
    finally:
        await service.stop()
    return finished_at


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    print(
        f"{EAST:,} east jobs, then {WEST:,} west jobs, {SECONDS * 1000:.0f} ms each;"
        " capacity 100, shares east 50 / west 50, batches of 1,000"
    )
    with tempfile.TemporaryDirectory(prefix="hipq-bench-share-") as tmp:
        for engine in engines:
            async with fresh_database(engine, opts, Path(tmp), f"share-{engine}") as url:
                regions = await backlog(url)
                done = await drain(url, regions)
            print(
                f"  {engine:<8} last west job done after {done['west']:6.1f}s,"
                f" last east job after {done['east']:6.1f}s",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
