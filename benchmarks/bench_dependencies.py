"""What a graph of ``after`` costs at size (prints figures, asserts nothing).

    python benchmarks/bench_dependencies.py --engine both --jobs 10000

On a fresh database per engine, four runs of ``--jobs`` jobs that wait:

- fan-out: one request of ``--jobs`` jobs ``after`` one job (as ``POST /v1/jobs/batch``
  stores it: the time is that transaction's, which holds the prerequisite locked), then
  the prerequisite cancelled by an operator (every job that waits is cancelled with it);
- the same fan-out whose prerequisite fails instead;
- chain: job ``i`` after job ``i - 1`` (its rows written straight into the tables, as
  the store writes them: storing a chain is not what is measured), then its head
  cancelled; and the same chain whose head fails.

Each line gives the seconds of the one transaction that ended the prerequisite (the
trigger cancels the whole graph in it) and checks that every job ended cancelled.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines
from sqlalchemy import bindparam, func, insert, select, update

from hipq.commands.bench import fresh_database, utcnow
from hipq.dependencies import AFTER_PARKED, waiting_reason
from hipq.jobs import NewJob
from hipq.store import Store
from hipq.store.schema import job_dependencies, jobs

CHUNK = 1000


def new_job(**fields: object) -> NewJob:
    return NewJob(type="noop", queue="default", payload={}, run_at=utcnow(), **fields)  # type: ignore[arg-type]


async def fan_out(store: Store, count: int) -> tuple[int, float]:
    """The prerequisite's id, and the seconds of the request that stores its dependents."""
    (first,) = (await store.job_insert_many([_later(new_job())], utcnow())).jobs
    started = time.perf_counter()
    await store.job_insert_many([new_job(after=[first.id])] * count, utcnow())
    return first.id, time.perf_counter() - started


def _later(job: NewJob) -> NewJob:
    return replace(job, run_at=utcnow() + timedelta(hours=1))


async def chain(store: Store, count: int) -> int:
    """A chain of ``count`` jobs after its head (rows written as the store writes them)."""
    (head,) = (await store.job_insert_many([_later(new_job())], utcnow())).jobs
    made = (await store.job_insert_many([new_job()] * count, utcnow())).jobs
    ids = [head.id] + [j.id for j in made]
    async with store.engine.begin() as conn:
        for start in range(1, len(ids), CHUNK):
            part = range(start, min(start + CHUNK, len(ids)))
            await conn.execute(
                insert(job_dependencies),
                [{"job_id": ids[i], "after_id": ids[i - 1], "outcome": None} for i in part],
            )
            await conn.execute(
                update(jobs)
                .where(jobs.c.id.in_([ids[i - 1] for i in part]))
                .values(has_dependents=True)
            )
            await conn.execute(
                update(jobs)
                .where(jobs.c.id == bindparam("b_id"))
                .values(
                    after=bindparam("b_after"),
                    after_failed="cancel",
                    after_run_at=jobs.c.run_at,
                    run_at=AFTER_PARKED,
                    waiting_for=1,
                    waiting_reason=bindparam("b_reason"),
                ),
                [
                    {
                        "b_id": ids[i],
                        "b_after": [ids[i - 1]],
                        "b_reason": waiting_reason([ids[i - 1]], "cancel"),
                    }
                    for i in part
                ],
            )
    return head.id


async def end(store: Store, head: int, how: str) -> float:
    started = time.perf_counter()
    if how == "cancel":
        await store.job_cancel(head, utcnow())
    else:
        await store.job_fail(head, utcnow(), "bench")
    return time.perf_counter() - started


async def cancelled(store: Store) -> tuple[int, int]:
    """(jobs cancelled, jobs in all) of the database."""
    async with store.engine.connect() as conn:
        done = await conn.execute(
            select(func.count()).select_from(jobs).where(jobs.c.state == "cancelled")
        )
        total = await conn.execute(select(func.count()).select_from(jobs))
        return done.scalar_one(), total.scalar_one()


async def run(url: str, count: int, shape: str, how: str) -> str:
    store = Store.from_url(url)
    try:
        stored = ""
        if shape == "fan-out":
            head, seconds = await fan_out(store, count)
            stored = f"stored in {seconds:6.2f} s, "
        else:
            head = await chain(store, count)
        seconds = await end(store, head, how)
        done, total = await cancelled(store)
        # The prerequisite itself is cancelled too when it is the one cancelled.
        expected = count + (1 if how == "cancel" else 0)
        check = "all cancelled" if done == expected else f"{done} of {expected} CANCELLED"
        return f"{shape:<8} {how:<6} {stored}ended in {seconds:6.2f} s ({check}, {total} jobs)"
    finally:
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    print(f"{args.jobs:,} jobs waiting, ended by their prerequisite")
    with tempfile.TemporaryDirectory(prefix="hipq-bench-deps-") as tmp:
        for engine in engines:
            for shape in ("fan-out", "chain"):
                for how in ("cancel", "fail"):
                    tag = f"deps-{engine}-{shape}-{how}"
                    async with fresh_database(engine, opts, Path(tmp), tag) as url:
                        print(f"  {engine:<8} {await run(url, args.jobs, shape, how)}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
