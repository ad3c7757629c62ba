"""Priority: lower numbers run first.

Run: python examples/priority/main.py

hipq runs in this process on a throwaway SQLite file. The queue runs one job at a time
and orders due jobs by priority, then run_at (``order: priority_time``). Six jobs are
posted while the queue is paused, in an order unrelated to their priorities; once it
is resumed they run from priority 1 to priority 100.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import httpx

from hipq.app import create_app
from hipq.config import load_settings
from hipq.service import Service
from hipq.transports.python import JobContext

RAN: list[str] = []


async def work(job: JobContext) -> None:
    RAN.append(job.payload["name"])


async def main() -> None:
    jobs = [("report", 50), ("backup", 100), ("payment", 1), ("email", 20), ("cleanup", 90)]
    jobs.append(("refund", 1))  # same priority as payment, posted later: runs after it
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            None,
            database_url=f"sqlite+aiosqlite:///{Path(tmp) / 'hipq.db'}",
            migrate_on_start=True,
            queues={
                "default": {"concurrency": 1, "order": "priority_time", "batch_interval": "50ms"}
            },
            job_types={"work": {"transport": {"python": {"handler": "__main__:work"}}}},
        )
        service = Service(settings)
        await service.start()
        app = create_app(service, manage_service=False)
        try:
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app), base_url="http://localhost"
            ) as api:
                await api.post("/v1/queues/default/pause")
                for name, priority in jobs:
                    body = {"type": "work", "payload": {"name": name}, "priority": priority}
                    (await api.post("/v1/jobs", json=body)).raise_for_status()
                await api.post("/v1/queues/default/resume")
                for _ in range(400):
                    if len(RAN) == len(jobs):
                        break
                    await asyncio.sleep(0.05)
        finally:
            await service.stop()
    priorities = dict(jobs)
    for name in RAN:
        print(f"priority {priorities[name]:>3}: {name}")


if __name__ == "__main__":
    asyncio.run(main())
