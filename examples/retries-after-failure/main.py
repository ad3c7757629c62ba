"""Retries after failure: a job whose handler fails twice, then succeeds.

Run: python examples/retries-after-failure/main.py

hipq runs in this process on a throwaway SQLite file; the job is posted through the
REST API. The job type retries with a fixed 1 s delay, at most 5 attempts: each failed
attempt is recorded, and the third attempt completes the job.
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


async def flaky(job: JobContext) -> dict[str, Any]:
    if job.attempt < 3:
        raise RuntimeError(f"the service is not ready (attempt {job.attempt})")
    return {"done_on_attempt": job.attempt}


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            None,
            database_url=f"sqlite+aiosqlite:///{Path(tmp) / 'hipq.db'}",
            migrate_on_start=True,
            queues={"default": {"batch_interval": "100ms"}},
            job_types={
                "flaky": {
                    "transport": {"python": {"handler": "__main__:flaky"}},
                    "retry": {"strategy": "fixed", "delay": "1s", "max_attempts": 5},
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
                job = (await api.post("/v1/jobs", json={"type": "flaky"})).json()
                for _ in range(200):
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
