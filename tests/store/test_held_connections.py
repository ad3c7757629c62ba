"""A one-statement insert whose held connection its server just ended is stored on
another connection: asyncpg may have read the session's end (its FATAL error) but
not yet the connection's close, and refuses the statement before sending it."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import pytest

from hipq.jobs import NewJob
from hipq.store import InsertResult, Store
from hipq.store.process_guard import asyncpg_dsn
from tests.support import eventually

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


async def test_an_insert_right_after_its_connection_was_ended_is_stored(
    postgres_url_fresh: str,
) -> None:
    store = Store.from_url(postgres_url_fresh)
    other = await asyncpg.connect(asyncpg_dsn(postgres_url_fresh))
    try:
        job = NewJob(type="ok", queue="default", payload={}, run_at=T0)
        [first] = await store.job_insert_each([([job], None)], T0)
        assert isinstance(first, InsertResult)
        for _ in range(10):
            held = {b for each in store.dialect._insert_engines.values() for b in each.backends}
            assert held
            await other.execute("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) pid", held)

            async def gone(pids: list[int] = sorted(held)) -> bool:
                # Ended on the server: its last message is on its way, or read.
                alive = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])"
                return await other.fetchval(alive, pids) == 0

            assert await eventually(gone, timeout=60)
            [result] = await store.job_insert_each([([job], None)], T0)
            assert isinstance(result, InsertResult)
        assert await other.fetchval("SELECT count(*) FROM hipq_jobs") == 11
    finally:
        await other.close()
        await store.close()
