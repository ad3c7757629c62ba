"""What adding jobs inside the application's transaction costs (prints figures, asserts
nothing).

    python benchmarks/bench_transactional.py --engine both --jobs 20000

On a fresh database with a job type whose correlation key is rendered from the
payload, adds ``--jobs`` jobs through ``hipq.transactional`` from one SQLAlchemy
asyncio connection: in transactions of 1,000 (``add_jobs_async``), then one job per
transaction (``add_job_async``, a tenth as many), and for comparison the same single
jobs through the store's own insert (what a POST writes, without the HTTP).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines

from hipq.commands.bench import BenchOptions, fresh_database, utcnow
from hipq.config import load_settings
from hipq.ingest.job_intake import Intake
from hipq.job_types import JobTypes
from hipq.plugins import RetryStrategies
from hipq.process.job_types_publisher import mirror_of
from hipq.store import Store
from hipq.transactional import add_job_async, add_jobs_async

BATCH = 1000


def job(i: int) -> dict[str, object]:
    return {"type": "receipt", "payload": {"order": i}, "labels": {"region": "east"}}


async def measure(engine: str, opts: BenchOptions, jobs: int, workdir: Path) -> None:
    async with fresh_database(engine, opts, workdir, "transactional") as url:
        settings = load_settings(
            None,
            database_url=url,
            queues={"default": {}},
            job_types={
                "receipt": {
                    "correlation_key": "receipt-{payload.order}",
                    "transport": {"python": {"handler": "hipq.handlers:noop"}},
                }
            },
        )
        retry = RetryStrategies()
        types = JobTypes.compile(settings, retry)
        store = Store.from_url(url)
        await store.job_types_mirror_write(*mirror_of(settings, types), "bench", utcnow())
        app = create_async_engine(url)
        try:
            started = time.perf_counter()
            for first in range(0, jobs, BATCH):
                async with app.begin() as conn:
                    await add_jobs_async(conn, [job(i) for i in range(first, first + BATCH)])
            batched = jobs / (time.perf_counter() - started)

            singles = jobs // 10
            started = time.perf_counter()
            for i in range(jobs, jobs + singles):
                async with app.begin() as conn:
                    await add_job_async(conn, "receipt", {"order": i}, labels={"region": "e"})
            single = singles / (time.perf_counter() - started)

            intake = Intake(settings, types, retry)
            started = time.perf_counter()
            for i in range(2 * jobs, 2 * jobs + singles):
                new = intake.resolve(job(i), utcnow())
                await store.job_insert_many([new], utcnow())
            posted = singles / (time.perf_counter() - started)
        finally:
            await app.dispose()
            await store.close()
    print(
        f"{engine:8} add_jobs (1,000 per transaction): {batched:9,.0f} jobs/s"
        f" | add_job (one per transaction): {single:7,.0f} jobs/s"
        f" | store insert of a posted job: {posted:7,.0f} jobs/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    with tempfile.TemporaryDirectory() as tmp:
        for engine in engines:
            asyncio.run(measure(engine, opts, args.jobs, Path(tmp)))


if __name__ == "__main__":
    main()
