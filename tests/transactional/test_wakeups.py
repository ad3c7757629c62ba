"""A job added in SQL wakes its queue's owner at COMMIT (PostgreSQL NOTIFY), never for
a transaction that rolls back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from hipq.lifecycle import State
from hipq.service import Service
from hipq.store import wakeup
from tests.support import eventually
from tests.transactional.apps import in_transaction, urls
from tests.transactional.conftest import started

pytestmark = pytest.mark.postgres

RECEIPT = {"type": "receipt", "payload": {"order": 17}, "labels": {"region": "east"}}


@pytest.fixture
async def listener(postgres_url_fresh: str) -> AsyncIterator[asyncio.Queue[str]]:
    """Every payload NOTIFYed on hipq's channel, in order."""
    heard: asyncio.Queue[str] = asyncio.Queue()
    conn = await asyncpg.connect(urls(postgres_url_fresh)["libpq"])
    await conn.add_listener(wakeup.CHANNEL, lambda *args: heard.put_nowait(args[3]))
    yield heard
    await conn.close()


async def test_commit_notifies_the_jobs_queue_and_rollback_does_not(
    postgres_url_fresh: str, listener: asyncio.Queue[str]
) -> None:
    svc = await started(postgres_url_fresh)
    try:
        url = postgres_url_fresh
        await in_transaction("asyncpg", url, 1, [RECEIPT], commit=False)
        await in_transaction("psycopg", url, 2, [{"type": "ok"}], commit=True)
        await in_transaction("asyncpg", url, 3, [RECEIPT, {"type": "ok"}], commit=True)
        heard = [await asyncio.wait_for(listener.get(), 10) for _ in range(3)]
    finally:
        await svc.stop()
    # The rolled-back job of queue "mail" sent nothing: the first wake-up is "default".
    assert heard[0] == wakeup.jobs_payload("default")
    assert sorted(heard[1:]) == ["default", "mail"]
    assert wakeup.decode(heard[0]) == wakeup.Wake(wakeup.WakeKind.JOBS, "default")
    assert listener.empty()


async def test_a_sleeping_loop_is_woken_by_a_job_added_in_sql(postgres_url_fresh: str) -> None:
    # The queue's tick is an hour: only the NOTIFY can make it run the job now.
    queues = {"default": {}, "mail": {"concurrency": 3, "batch_interval": "1h"}}
    svc: Service = await started(postgres_url_fresh, run_loops=True, queues=queues)
    try:
        loop = svc.loops["mail"]
        await eventually(lambda: loop.token is not None)  # it owns the queue
        await asyncio.sleep(0.2)  # and sleeps towards its next tick
        [job_id] = await in_transaction("asyncpg", postgres_url_fresh, 1, [RECEIPT], commit=True)

        async def completed() -> bool:
            return (await svc.store.job_get(job_id)).state is State.COMPLETED

        assert await eventually(completed, timeout=60)
    finally:
        await svc.stop()
