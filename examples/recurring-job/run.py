"""Run the recurring-job example: `.venv/bin/python examples/recurring-job/run.py`
(any Python with hipq installed; `./scripts/serve` makes .venv).

It serves config.yaml's schedule on a throwaway SQLite database and time-lapses one
day: a clock that this script moves by 30 minutes per step (hipq reads time only
through its clock, the same seam its tests use). Each step the scheduler makes the
due report job and the queue's loop runs it. With `hipq serve --config
examples/recurring-job/config.yaml` the same schedule runs in real time.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # report.py, the handler

try:
    from hipq.config import load_settings
except ModuleNotFoundError:  # run with a Python that lacks hipq: say which one has it
    sys.exit("hipq is not installed for this Python: run .venv/bin/python " + " ".join(sys.argv))
from hipq.lifecycle import State  # noqa: E402
from hipq.service import Service  # noqa: E402
from hipq.store import JobFilter  # noqa: E402

STEPS = 48  # a day of half hours


class LapseClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 28, 23, 0, 20, tzinfo=UTC)  # before spring forward

    def __call__(self) -> datetime:
        return self.now


async def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{tmp}/hipq.db"
        settings = load_settings(HERE / "config.yaml", database_url=url, log_level="warning")
        clock = LapseClock()
        service = Service(settings, clock=clock, run_loops=False)
        await service.start()
        try:
            scheduler, loop = service.scheduler, service.loops["default"]
            assert scheduler is not None and await loop.acquire()
            for _ in range(STEPS):
                clock.now += timedelta(minutes=30)
                for result in await scheduler.run_once():
                    if result.job is not None:
                        print(
                            f"{result.at:%Y-%m-%d %H:%M} UTC  job {result.job.id}  "
                            f"{result.job.payload['period_end']}"
                        )
                for _ in range(3):  # claim, run, record
                    await loop.run_once()
                    await asyncio.sleep(0.02)
            done = await service.store.job_list(JobFilter(limit=1000))
        finally:
            await service.stop()
    completed = sum(1 for job in done if job.state is State.COMPLETED)
    print(f"{len(done)} report jobs, {completed} completed")
    return 0 if done and completed == len(done) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
