"""A hint that arrives while a tick waits for SQLite's write lock is for the next tick:
the tick reads what it decided to read when it chose where its lease fence goes, so
it never sends a statement before that fence (``RuntimeError: a statement before the
lease fence`` was the symptom)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from hipq.batch_loop import loop as loop_module
from tests.api.conftest import open_api

BEATING = {
    "heartbeat_timeout": "30s",
    "correlation_key": "{payload.n}",
    "transport": {"http": {"url": "http://127.0.0.1:9/work"}},
}


async def test_hints_during_the_wait_for_the_write_lock_wait_for_the_next_tick(
    sqlite_template: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shutil.copy(sqlite_template, tmp_path / "hipq.db")
    sqlite_url = f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}"
    # No periodic recheck in this test: only the hints below ask the tick to look.
    monkeypatch.setattr(loop_module, "RECHECK_SECONDS", 3600.0)
    async with open_api(sqlite_url, job_types={"beating": BEATING}) as api:
        loop = api.loop()
        await api.tick(ticks=2)  # the first ticks look for everything once
        job = await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        store = api.service.store
        for _round in range(3):
            async with store._write() as held:  # another writer holds SQLite's lock
                await held.exec_driver_sql("UPDATE hipq_queues SET name = name")
                tick = asyncio.create_task(loop.run_once())
                await asyncio.sleep(0.3)  # the tick chose its fence and waits for the lock
                # Meanwhile: a heartbeat, a cancel or a limits change, and a response.
                loop.hint_cancels()
                loop.hint_responses()
            await asyncio.wait_for(tick, 30)
            # The hinted reads happen at the next tick, after its fence.
            await asyncio.wait_for(loop.run_once(), 30)
        cancel = await api.client.post(f"/v1/jobs/{job['id']}/cancel", json={})
        assert cancel.status_code == 200, cancel.text
        await api.tick(ticks=1)
        assert (await api.job(job["id"]))["state"] == "cancelled"
