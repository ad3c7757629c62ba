"""What the scheduler costs (prints figures, asserts nothing).

    python benchmarks/bench_schedules.py --engine both --schedules 200

Two figures per engine, on a Service whose clock the script sets (no waiting):

- an idle tick: ``--schedules`` schedules, none due; how long one scheduler tick
  takes (each process runs one every ``scheduler.interval``, 1 s);
- a catch-up: one ``* * * * *`` schedule with ``catch_up: all`` that missed a day
  (1,440 fire times); how fast the ticks claim the fire times and insert their jobs.

And, without a database, the CPU of the cron searches a request may cause: refusing
an expression that never fires (each search stops 10 years ahead) and listing 1,000
fire times (``/next?count=1000``, run off the event loop).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines

from hipq.commands.bench import fresh_database
from hipq.config import load_settings
from hipq.process.scheduler import to_row
from hipq.service import Service

START = datetime(2026, 3, 2, 9, 30, 30, tzinfo=UTC)


class Clock:
    now = START

    def __call__(self) -> datetime:
        return self.now


async def measure(url: str, count: int) -> tuple[float, int, float]:
    settings = load_settings(
        None,
        database_url=url,
        log_level="warning",
        job_types={"noop": {"transport": {"python": {"handler": "hipq.handlers:noop"}}}},
    )
    clock = Clock()
    service = Service(settings, clock=clock, run_loops=False)
    await service.start()
    try:
        scheduler = service.scheduler
        assert scheduler is not None
        for i in range(count):
            fields = {"cron": f"{i % 60} 3 * * *", "job": {"type": "noop"}}
            schedule = scheduler.check(f"idle-{i}", fields)
            await service.store.schedule_create(to_row(schedule, clock.now))
        await scheduler.run_once()
        ticks = 20
        t = time.perf_counter()
        for _ in range(ticks):
            await scheduler.run_once()
        idle_ms = (time.perf_counter() - t) / ticks * 1000
        for i in range(count):
            await service.store.schedule_delete(f"idle-{i}")
        day_ago = clock.now - timedelta(days=1)
        fields = {"cron": "* * * * *", "job": {"type": "noop"}, "catch_up": "all"}
        await service.store.schedule_create(
            to_row(scheduler.check("minutely", fields), day_ago, day_ago)
        )
        made = 0
        t = time.perf_counter()
        while True:
            done = await scheduler.run_once()
            if not done:
                break
            made += sum(1 for r in done if r.job is not None)
        return idle_ms, made, time.perf_counter() - t
    finally:
        await service.stop()


def cron_figures() -> None:
    from hipq.schedules import Cron, ScheduleError

    for expression in ("0 0 30 2 *", "0 0 31 4,6,9,11 *"):
        started = time.process_time()
        for _ in range(20):
            try:
                Cron.parse(expression, "Europe/Berlin", START)
            except ScheduleError:
                pass
        ms = (time.process_time() - started) / 20 * 1000
        print(f"  cron {expression!r:<22} refused in {ms:5.2f} ms CPU", flush=True)
    for expression in ("*/5 * * * *", "0 0 1 * mon"):
        cron = Cron.parse(expression, "Europe/Berlin", START)
        started = time.process_time()
        fires = cron.fire_times(START)
        for _ in range(1000):
            next(fires)
        ms = (time.process_time() - started) * 1000
        print(f"  cron {expression!r:<22} 1,000 fire times in {ms:5.1f} ms CPU", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--schedules", type=int, default=200)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    cron_figures()
    with tempfile.TemporaryDirectory(prefix="hipq-bench-schedules-") as tmp:
        for engine in engines:
            async with fresh_database(engine, opts, Path(tmp), f"schedules-{engine}") as url:
                idle_ms, made, seconds = await measure(url, args.schedules)
            print(
                f"  {engine:<8} idle tick over {args.schedules} schedules: {idle_ms:6.1f} ms"
                f"   catch-up: {made:,} fire times in {seconds:.2f}s"
                f" ({made / seconds:,.0f} jobs/s)",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
