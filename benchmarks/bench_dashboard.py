"""How long the dashboard's pages take on a big database (prints figures, asserts nothing).

    python benchmarks/bench_dashboard.py --engine both --jobs 1000000

Fills a fresh database with ``--jobs`` jobs as a long-running hipq would hold them:
97 % completed, 1 % failed (five different errors), 1 % cancelled, 1 % scheduled and
due (with a region label, some with a job key), a few hundred awaiting a response
with a correlation key, and an hour of attempts for the charts (on PostgreSQL then
VACUUM ANALYZE, as autovacuum would). Then renders each page in process (the app
without its queue loops) and prints the median of five renders after one warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import httpx
from sqlalchemy import insert, update

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines

from hipq.app import create_app
from hipq.commands.bench import NOOP_TYPE, QUEUE, fresh_database, settings_data, utcnow
from hipq.config import Settings
from hipq.jobs import NewJob
from hipq.service import Service
from hipq.store import Store
from hipq.store.schema import attempts, jobs

CHUNK = 10_000
ERRORS = [f"RuntimeError: upstream {n} refused the request" for n in range(5)]


async def fill(store: Store, count: int) -> dict[str, str]:
    """The database described above; some values the pages are then asked about."""
    now = utcnow()
    start = now - timedelta(days=10)
    step = timedelta(days=10) / count
    for first in range(0, count, CHUNK):
        size = min(count, first + CHUNK) - first
        created = start + step * first
        new = [
            NewJob(
                type=NOOP_TYPE,
                queue=QUEUE,
                payload={"n": first + i},
                run_at=created,
                labels={"region": ("east", "west", "north")[i % 3]},
                job_key=f"key-{first + i}" if (first + i) % 1000 == 7 else None,
                correlation_key=f"order-{first + i}" if (first + i) % 2000 == 11 else None,
            )
            for i in range(size)
        ]
        ids = [j.id for j in (await store.job_insert_many(new, created)).jobs]
        async with store.engine.begin() as conn:
            await _settle(conn, ids, created)
    async with store.engine.begin() as conn:
        # An hour of attempts for the charts: one a second.
        rows = [
            {
                "job_id": 1 + n % count,
                "attempt": 1000 + n,
                "started_at": now - timedelta(seconds=n),
                "finished_at": now - timedelta(seconds=n - 1),
                "outcome": "completed" if n % 20 else "retried",
            }
            for n in range(3600)
        ]
        await conn.execute(insert(attempts), rows)
    if store.engine.dialect.name == "postgresql":
        # The fill updated nearly every row once: what autovacuum does to a live
        # database within minutes, done now, or every index read wades through dead rows.
        async with store.engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            await conn.exec_driver_sql("VACUUM ANALYZE")
    middle = start + timedelta(days=5)
    return {
        "since": middle.strftime("%Y-%m-%dT%H:%M:%S"),
        "until": (middle + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S"),
        "job_key": "key-7",
        "correlation_key": "order-11",
        "job_id": str(count // 2),
    }


async def _settle(conn: object, ids: list[int], at: object) -> None:
    """97 % completed, 1 % failed, 1 % cancelled, the rest left scheduled (and due)."""
    c = jobs.c
    finished = {"finished_at": at, "attempt": 1}
    by_state: dict[str, list[int]] = {"completed": [], "failed": [], "cancelled": []}
    awaiting = []
    for job_id in ids:
        k = job_id % 100
        if k == 98:
            by_state["failed"].append(job_id)
        elif k == 97:
            by_state["cancelled"].append(job_id)
        elif k == 99:
            if job_id % 2000 == 99:  # a few in flight, awaiting a response
                awaiting.append(job_id)
        else:
            by_state["completed"].append(job_id)
    for state, chosen in by_state.items():
        if not chosen:
            continue
        values = {"state": state, **finished}
        if state == "failed":
            for n, error in enumerate(ERRORS):
                part = [i for i in chosen if i % len(ERRORS) == n]
                if part:
                    await conn.execute(  # type: ignore[attr-defined]
                        update(jobs).where(c.id.in_(part)).values(**values, last_error=error)
                    )
            continue
        await conn.execute(update(jobs).where(c.id.in_(chosen)).values(**values))  # type: ignore[attr-defined]
    if awaiting:
        await conn.execute(  # type: ignore[attr-defined]
            update(jobs).where(c.id.in_(awaiting)).values(state="awaiting", attempt=1)
        )


async def time_pages(url: str, asked: dict[str, str]) -> list[tuple[str, float, int]]:
    settings = Settings(**settings_data(url, 0))
    service = Service(settings, run_loops=False)
    await service.start()
    pages = [
        "/dashboard",
        "/dashboard/jobs",
        "/dashboard/jobs?state=failed",
        "/dashboard/jobs?state=scheduled&state=awaiting",
        "/dashboard/jobs?label=region:east",
        f"/dashboard/jobs?job_key={asked['job_key']}",
        f"/dashboard/jobs?correlation_key={asked['correlation_key']}",
        f"/dashboard/jobs?since={asked['since']}&until={asked['until']}",
        f"/dashboard/jobs/{asked['job_id']}",
        "/dashboard/failed",
        "/dashboard/responses",
        "/dashboard/history?period=24h",
        "/dashboard/history?period=7d",
    ]
    out = []
    try:
        app = create_app(service, manage_service=False)
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            for page in pages:
                times = []
                status = 0
                for _ in range(6):
                    t = time.perf_counter()
                    response = await client.get(page)
                    times.append(time.perf_counter() - t)
                    status = response.status_code
                out.append((page, statistics.median(times[1:]), status))
    finally:
        await service.stop()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    print(f"dashboard pages over {args.jobs:,} jobs (median of 5 renders, in process)")
    with tempfile.TemporaryDirectory(prefix="hipq-bench-dashboard-") as tmp:
        for engine in engines:
            async with fresh_database(engine, opts, Path(tmp), f"dashboard-{engine}") as url:
                store = Store.from_url(url)
                try:
                    t = time.perf_counter()
                    asked = await fill(store, args.jobs)
                    print(f"  {engine}: filled in {time.perf_counter() - t:.0f}s", flush=True)
                finally:
                    await store.close()
                for page, seconds, status in await time_pages(url, asked):
                    print(f"  {engine:<8} {seconds * 1000:8.1f} ms  {status}  {page}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
