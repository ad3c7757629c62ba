"""Aging: with priority_time order, a long-waiting job overtakes newer, better ones."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from hipq.service import Service
from tests import handlers
from tests.support import FakeClock, make_settings


@pytest.mark.parametrize(("aging", "expected"), [(None, "new,old"), ("10s", "old,new")])
async def test_aging_lets_an_old_low_priority_job_go_first(
    database_url: str, aging: str | None, expected: str
) -> None:
    queue = {"concurrency": 1, "order": "priority_time", "aging": aging}
    clock = FakeClock()
    service = Service(
        make_settings(database_url, queues={"default": queue}), clock=clock, run_loops=False
    )
    await service.start()
    try:
        now = clock()
        new = [
            # Waited an hour at priority 200: with aging 10s its effective priority is
            # 200 - 360 = -160, ahead of the fresh priority-100 job.
            service.intake.resolve(
                {
                    "type": "record",
                    "payload": {"name": "old"},
                    "priority": 200,
                    "run_at": now - timedelta(hours=1),
                },
                now,
            ),
            service.intake.resolve(
                {"type": "record", "payload": {"name": "new"}, "priority": 100}, now
            ),
        ]
        await service.store.job_insert_many(new, now)
        loop = service.loops["default"]
        assert await loop.acquire()
        for _ in range(4):
            await loop.run_once()
            await asyncio.sleep(0.01)
    finally:
        await service.stop()
    assert ",".join(payload["name"] for _, _, payload in handlers.SEEN) == expected
