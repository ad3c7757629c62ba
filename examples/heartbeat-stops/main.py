"""A job whose heartbeat stops, and is retried.

Run: python examples/heartbeat-stops/main.py

The job type's timeout is 1 s: a running job that does not heartbeat within that is
timed out and goes through its retry strategy. The handler heartbeats while it makes
progress; on its first attempt it then gets stuck (no more heartbeats), so hipq times
the attempt out and retries it; the second attempt finishes.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import httpx

from hipq.app import create_app
from hipq.config import load_settings
from hipq.service import Service
from hipq.transports.python import JobContext


async def crawl(job: JobContext) -> dict[str, Any]:
    for _page in range(4):
        await asyncio.sleep(0.3)  # a page of work, well within the 1 s timeout
        job.heartbeat()  # still alive: the deadline moves to now + timeout
    if job.attempt == 1:
        await asyncio.sleep(3600)  # stuck: no heartbeat comes any more
    return {"pages": 4, "attempt": job.attempt}


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            None,
            database_url=f"sqlite+aiosqlite:///{Path(tmp) / 'hipq.db'}",
            migrate_on_start=True,
            queues={"default": {"batch_interval": "100ms"}},
            job_types={
                "crawl": {
                    "transport": {"python": {"handler": "__main__:crawl"}},
                    "timeout": "1s",
                    "retry": {"strategy": "fixed", "delay": "200ms", "max_attempts": 3},
                }
            },
        )
        service = Service(settings)
        await service.start()
        app = create_app(service, manage_service=False)
        try:
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app), base_url="http://localhost"
            ) as api:
                job = (await api.post("/v1/jobs", json={"type": "crawl"})).json()
                for _ in range(400):
                    job = (await api.get(f"/v1/jobs/{job['id']}")).json()
                    if job["state"] in ("completed", "failed"):
                        break
                    await asyncio.sleep(0.05)
        finally:
            await service.stop()
    for attempt in job["attempts"]:
        print(f"attempt {attempt['attempt']}: {attempt['outcome']:<9} {attempt['error'] or ''}")
    print(f"job {job['id']} {job['state']}: {job['result']}")


if __name__ == "__main__":
    asyncio.run(main())
