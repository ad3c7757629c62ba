"""What the outbox trigger adds to the loop's settle (prints figures, asserts nothing).

    python benchmarks/bench_outbox.py --engine both --jobs 20000

Per engine: ``--jobs`` running jobs are settled `completed` through the dialect's
batch settle (the loop's statement), 1,000 per transaction, three ways:

- without the trigger (dropped for the run): the settle as it was before the outbox,
- with the trigger, jobs without ``notify``: what every job now pays (on PostgreSQL
  also the ``settled:<queue>`` NOTIFY that wakes ``?wait=`` requests),
- with the trigger, jobs with ``notify: [one target]``: one outbox row per job.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines
from sqlalchemy import text, update

from hipq.commands.bench import fresh_database
from hipq.jobs import NewJob
from hipq.lifecycle import State
from hipq.outcomes import Settlement
from hipq.store import Store
from hipq.store.schema import jobs

BATCH = 1000
NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
PG = "hipq_jobs_finished"
SQLITE_TRIGGER = "hipq_jobs_outbox"


async def running_jobs(store: Store, count: int, notify: list[str] | None) -> list[int]:
    ids: list[int] = []
    for start in range(0, count, BATCH):
        new = [
            NewJob(type="t", queue="q", payload={}, run_at=NOW, notify=notify)
            for _ in range(min(BATCH, count - start))
        ]
        ids.extend(j.id for j in (await store.job_insert_many(new, NOW)).jobs)
    async with store.engine.begin() as conn:
        await conn.execute(
            update(jobs).values(state=State.RUNNING.value, attempt=1, claimed_at=NOW)
        )
    return ids


async def settle_all(store: Store, ids: list[int]) -> float:
    """Seconds to settle ``ids`` `completed`, a transaction per BATCH."""
    t = time.perf_counter()
    for start in range(0, len(ids), BATCH):
        settlements = [
            Settlement(i, 1, State.COMPLETED, NOW, {}, NOW, {"ok": True}, None, None)
            for i in ids[start : start + BATCH]
        ]
        async with store.engine.begin() as conn:
            await store.dialect.job_settle(conn, settlements, NOW)
    return time.perf_counter() - t


async def measure(url: str, count: int, rounds: int) -> list[tuple[str, float]]:
    """The best rate of each way over ``rounds`` interleaved rounds (a shared machine)."""
    store = Store.from_url(url)
    pg = store.dialect.name == "postgresql"
    best: dict[str, float] = {}
    ways = (
        ("no trigger", None, False),
        ("trigger, no notify", None, True),
        ("trigger, 1 target", ["hook"], True),
    )
    try:
        for label, notify, trigger in ways * rounds:
            await store.tables_empty()
            ids = await running_jobs(store, count, notify)
            if not trigger:
                async with store.engine.begin() as conn:
                    if pg:
                        await conn.execute(text(f"ALTER TABLE hipq_jobs DISABLE TRIGGER {PG}"))
                    else:
                        ddl = (
                            await conn.execute(
                                text("SELECT sql FROM sqlite_master WHERE name = :n"),
                                {"n": SQLITE_TRIGGER},
                            )
                        ).scalar_one()
                        await conn.execute(text(f"DROP TRIGGER {SQLITE_TRIGGER}"))
            seconds = await settle_all(store, ids)
            if not trigger:
                async with store.engine.begin() as conn:
                    if pg:
                        await conn.execute(text(f"ALTER TABLE hipq_jobs ENABLE TRIGGER {PG}"))
                    else:
                        await conn.execute(text(ddl))
            best[label] = max(best.get(label, 0.0), count / seconds)
    finally:
        await store.close()
    return list(best.items())


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    with tempfile.TemporaryDirectory(prefix="hipq-bench-outbox-") as tmp:
        for engine in engines:
            async with fresh_database(engine, opts, Path(tmp), f"outbox-{engine}") as url:
                rows = await measure(url, args.jobs, args.rounds)
            figures = "   ".join(f"{label}: {rate:8,.0f} jobs/s" for label, rate in rows)
            print(f"  {engine:<8} settle {args.jobs:,} jobs   {figures}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
