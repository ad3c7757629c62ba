"""What deleting finished jobs costs (prints figures, asserts nothing).

    python benchmarks/bench_prune.py --engine both --jobs 200000

Fills a fresh database with ``--jobs`` completed jobs, each with one attempt, and
as many scheduled jobs, then deletes the completed ones as the upkeep's
``job_retention`` sweep does: batches of 5,000, one transaction each. Prints the
rate and the longest batch, which is how long the sweep holds the write lock at
once (on SQLite, every other writer waits that long at most).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert, select, update

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines

from hipq.commands.bench import fresh_database, utcnow
from hipq.jobs import NewJob
from hipq.lifecycle import State
from hipq.process.upkeep import PRUNE_BATCH
from hipq.store import Store
from hipq.store.schema import attempts, jobs


async def fill(store: Store, count: int) -> None:
    """``count`` completed jobs with one attempt each, and ``count`` scheduled ones."""
    now = utcnow()
    finished = now - timedelta(days=30)
    for first in range(0, count, 10_000):
        size = min(count, first + 10_000) - first
        new = [NewJob(type="noop", queue="default", payload={"n": 1}, run_at=now)] * size
        done = (await store.job_insert_many(new, now)).jobs
        await store.job_insert_many(new, now)
        ids = [j.id for j in done]
        async with store.engine.begin() as conn:
            await conn.execute(
                update(jobs)
                .where(jobs.c.id.in_(ids))
                .values(state=State.COMPLETED.value, attempt=1, finished_at=finished)
            )
            await conn.execute(
                insert(attempts),
                [
                    {
                        "job_id": i,
                        "attempt": 1,
                        "started_at": finished,
                        "finished_at": finished,
                        "outcome": "completed",
                    }
                    for i in ids
                ],
            )


async def prune(store: Store) -> tuple[int, float, float]:
    """Delete every completed job; (deleted, seconds, longest batch in seconds)."""
    cutoff = utcnow() - timedelta(days=1)
    total, longest = 0, 0.0
    started = time.perf_counter()
    while True:
        t = time.perf_counter()
        deleted = await store.job_prune(State.COMPLETED, cutoff, PRUNE_BATCH)
        longest = max(longest, time.perf_counter() - t)
        total += deleted
        if deleted < PRUNE_BATCH:
            return total, time.perf_counter() - started, longest


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--jobs", type=int, default=200_000)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    print(f"deleting {args.jobs:,} completed jobs (next to as many scheduled ones)")
    with tempfile.TemporaryDirectory(prefix="hipq-bench-prune-") as tmp:
        for engine in engines:
            async with fresh_database(engine, opts, Path(tmp), f"prune-{engine}") as url:
                store = Store.from_url(url)
                try:
                    await fill(store, args.jobs)
                    deleted, seconds, longest = await prune(store)
                    async with store.engine.connect() as conn:
                        left = len((await conn.execute(select(attempts.c.job_id))).all())
                finally:
                    await store.close()
            print(
                f"  {engine:<8} {deleted / seconds:>9,.0f} jobs/s deleted"
                f"   longest batch of {PRUNE_BATCH:,}: {longest * 1000:6.0f} ms"
                f"   ({deleted:,} in {seconds:.1f}s; {left} attempts left)",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
