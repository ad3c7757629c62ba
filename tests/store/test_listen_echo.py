"""The LISTEN connection leaves alone the echo of this process's own one-statement
inserts (delivered in process at their commit) and delivers every other NOTIFY."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from sqlalchemy.exc import DBAPIError

from hipq.jobs import NewJob
from hipq.store import InsertResult, Store, wakeup
from hipq.store.process_guard import asyncpg_dsn
from tests.support import eventually

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


async def test_own_inserts_wake_once_and_other_senders_are_heard(postgres_url_fresh: str) -> None:
    store = Store.from_url(postgres_url_fresh)
    in_process: list[str] = []
    heard: list[str] = []
    store.listeners.append(in_process.append)
    guard = store.process_guard(postgres_url_fresh, heard.append)
    await guard.start()
    other = await asyncpg.connect(asyncpg_dsn(postgres_url_fresh))
    try:
        assert await eventually(guard.run_once, timeout=60)
        job = NewJob(type="ok", queue="default", payload={}, run_at=T0)
        [mine] = await store.job_insert_each([([job], None)], T0)
        assert isinstance(mine, InsertResult)
        assert in_process == [wakeup.jobs_payload("default")]
        # Another process's job: NOTIFYs reach the listener in commit order, so once
        # this one is heard the echo of the insert above has come and gone.
        await other.execute("SELECT pg_notify($1, $2)", wakeup.CHANNEL, "jobs:mail")
        await eventually(lambda: heard, timeout=60)
        await asyncio.sleep(0.1)
        assert heard == ["jobs:mail"]
        # The insert's connection lost: its replacement's backend is known too, and the
        # lost one's is forgotten (another process may be given its id).
        backends = {b for held in store.dialect._insert_engines.values() for b in held.backends}
        assert len(backends) == 1
        lost = backends.pop()
        await other.execute("SELECT pg_terminate_backend($1)", lost)

        async def stored() -> bool:
            try:  # the first statement may meet the ended connection before its end
                [result] = await store.job_insert_each([([job], None)], T0)
            except DBAPIError:
                return False
            return isinstance(result, InsertResult)

        assert await eventually(stored, timeout=60)
        held = {b for each in store.dialect._insert_engines.values() for b in each.backends}
        assert lost not in held and len(held) == 1
        await other.execute("SELECT pg_notify($1, $2)", wakeup.CHANNEL, "jobs:other")
        await eventually(lambda: len(heard) == 2, timeout=60)
        await asyncio.sleep(0.1)
        assert heard == ["jobs:mail", "jobs:other"]
        assert len(in_process) == 2
    finally:
        await other.close()
        await guard.stop()
        await store.close()


async def test_a_statement_whose_server_process_ends_gives_up_its_connection(
    postgres_url_fresh: str,
) -> None:
    """The server ends the session under a running statement (FATAL, reported like a
    statement's error): the connection is thrown away at once, not kept for the next
    statement, and its server process id is forgotten."""
    store = Store.from_url(postgres_url_fresh)
    dialect = store.dialect
    held = dialect._insert_engines  # type: ignore[attr-defined]
    other = await asyncpg.connect(asyncpg_dsn(postgres_url_fresh))

    async def sleep_there() -> None:
        await dialect._autocommit(  # type: ignore[attr-defined]
            store.engine, lambda driver: driver.execute("SELECT pg_sleep(60)")
        )

    try:
        sleeping = asyncio.create_task(sleep_there())

        async def asleep() -> int | None:
            return await other.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)'"
            )

        pid = await eventually(asleep, timeout=60)
        assert pid in {b for each in held.values() for b in each.backends}
        await other.execute("SELECT pg_terminate_backend($1)", pid)
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await asyncio.wait_for(sleeping, 30)
        assert pid not in {b for each in held.values() for b in each.backends}

        async def one(driver: Any) -> tuple[int, int]:
            return await driver.fetchval("SELECT 1"), driver.get_server_pid()

        one_and_pid = await dialect._autocommit(store.engine, one)  # type: ignore[attr-defined]
        assert one_and_pid[0] == 1 and one_and_pid[1] != pid
    finally:
        await other.close()
        await store.close()
