"""Two transactions adding a job with the same correlation key at once (PostgreSQL):
the second waits on the unique index, and when the first commits it gets the API's
conflict, not a raw unique violation; one job exists."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from hipq.transactional import EnqueueError, add_jobs_async
from tests.support import eventually
from tests.transactional.apps import urls
from tests.transactional.conftest import started

pytestmark = pytest.mark.postgres

RECEIPT = {"type": "receipt", "payload": {"order": 17}, "labels": {"region": "east"}}


async def test_two_transactions_racing_for_a_key_give_one_job_and_a_conflict(
    postgres_url_fresh: str,
) -> None:
    libpq = urls(postgres_url_fresh)["libpq"]
    svc = await started(postgres_url_fresh)
    first, second, watcher = [await asyncpg.connect(libpq) for _ in range(3)]
    try:
        holding = first.transaction()
        await holding.start()
        [kept] = await add_jobs_async(first, [RECEIPT])  # uncommitted: the second can't see it

        async def racer() -> None:
            async with second.transaction():
                await add_jobs_async(second, [RECEIPT])

        race = asyncio.create_task(racer())
        pid = second.get_server_pid()

        async def second_waits_on_the_index() -> bool:
            query = "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1"
            return await watcher.fetchval(query, pid) == "Lock"

        await eventually(second_waits_on_the_index)
        await holding.commit()
        with pytest.raises(EnqueueError) as caught:
            await race
        assert caught.value.conflict and caught.value.field == "correlation_key"
        jobs = await watcher.fetch("SELECT id FROM hipq_jobs")
        assert [r["id"] for r in jobs] == [kept]
    finally:
        for conn in (first, second, watcher):
            await conn.close()
        await svc.stop()
