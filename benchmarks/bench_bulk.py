"""What a bulk operation costs (prints figures, asserts nothing).

    python benchmarks/bench_bulk.py --engine both --jobs 200000

Fills a fresh database with ``--jobs`` scheduled jobs labelled ``batch=a`` and as
many labelled ``batch=b``, counts the ``a`` jobs (the dry run), then cancels them as
``POST /v1/jobs/bulk`` does: steps of ``server.bulk_step_size`` jobs (1,000), one
transaction each. Prints the rate and the longest step, which is how long the
operation holds its row locks at once (on SQLite, the write lock: every other writer
waits that long at most).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines

from hipq.commands.bench import fresh_database, utcnow
from hipq.jobs import NewJob
from hipq.process.bulk_runner import DEFAULT_STEP_SIZE
from hipq.store import Store
from hipq.store.bulk import BulkFilter


async def fill(store: Store, count: int) -> None:
    now = utcnow()
    for first in range(0, count, 10_000):
        size = min(count, first + 10_000) - first
        for group in ("a", "b"):
            new = [
                NewJob(
                    type="noop", queue="default", payload={}, run_at=now, labels={"batch": group}
                )
            ] * size
            await store.job_insert_many(new, now)


async def cancel(store: Store, step: int) -> tuple[float, int, float, float]:
    """(dry-run seconds, cancelled, seconds, longest step in seconds)."""
    flt = BulkFilter(labels={"batch": "a"})
    t = time.perf_counter()
    await store.bulk_count(flt)
    counted = time.perf_counter() - t
    op = await store.bulk_create("cancel", flt, {"reason": "bench"}, utcnow())
    longest, started = 0.0, time.perf_counter()
    while op.state == "running":
        t = time.perf_counter()
        op = await store.bulk_step(op.id, step, utcnow())
        longest = max(longest, time.perf_counter() - t)
    return counted, op.changed, time.perf_counter() - started, longest


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--step", type=int, default=DEFAULT_STEP_SIZE)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    print(f"cancelling {args.jobs:,} of {2 * args.jobs:,} scheduled jobs by label")
    with tempfile.TemporaryDirectory(prefix="hipq-bench-bulk-") as tmp:
        for engine in engines:
            async with fresh_database(engine, opts, Path(tmp), f"bulk-{engine}") as url:
                store = Store.from_url(url)
                try:
                    await fill(store, args.jobs)
                    counted, done, seconds, longest = await cancel(store, args.step)
                finally:
                    await store.close()
            print(
                f"  {engine:<8} dry run {counted * 1000:6.0f} ms"
                f"   {done / seconds:>9,.0f} jobs/s cancelled"
                f"   longest step of {args.step:,}: {longest * 1000:6.0f} ms"
                f"   ({done:,} in {seconds:.1f}s)",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
