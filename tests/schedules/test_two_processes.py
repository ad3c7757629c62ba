"""Two real `hipq serve` processes on one PostgreSQL: each fire time is one job, also
when one of them is killed (SIGKILL) while both decide the same fire times.

Waiting for minute-long cron ticks in real time would take minutes, so the test
moves the schedule's ``checked_until`` back in the database: both processes then
find the same hour of due fire times at once (catch_up: all) and race for them.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from sqlalchemy import select, update

from hipq.store import Store
from hipq.store.schema import jobs, schedules
from tests.e2e.conftest import Servers, wait_for, write_config
from tests.services import create_database_sync, drop_database_sync, unique_database_name

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def _run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


async def _rewind(url: str, minutes: int) -> None:
    store = Store.from_url(url)
    try:
        async with store.engine.begin() as conn:
            back = datetime.now(UTC) - timedelta(minutes=minutes)
            await conn.execute(update(schedules).values(checked_until=back))
    finally:
        await store.close()


async def _fire_times(url: str) -> Counter[str]:
    store = Store.from_url(url)
    try:
        async with store.engine.connect() as conn:
            rows = await conn.execute(select(jobs.c.labels))
            return Counter(r.labels["fire_time"] for r in rows if "fire_time" in r.labels)
    finally:
        await store.close()


async def _caught_up(url: str) -> bool:
    store = Store.from_url(url)
    try:
        async with store.engine.connect() as conn:
            until = (await conn.execute(select(schedules.c.checked_until))).scalar_one()
            return bool(until > datetime.now(UTC) - timedelta(seconds=30))
    finally:
        await store.close()


def test_two_processes_make_each_fire_time_once_when_one_is_killed(
    servers: Servers, tmp_path: Path, postgres_admin_url: str
) -> None:
    name = unique_database_name()
    url = create_database_sync(postgres_admin_url, name)
    try:
        config = write_config(tmp_path / "hipq.yaml", url, scheduler={"interval": "50ms"})
        a = servers.start("a", config)
        b = servers.start("b", config)
        a.post(
            "/v1/schedules",
            {
                "name": "minutely",
                "cron": "* * * * *",
                "job": {"type": "record", "payload": {"at": "{fire.time}"}},
                "catch_up": "all",
                "backfill": "3h",
            },
        )
        _run(_rewind(url, 60))  # both now race for an hour of fire times
        a.kill()
        wait_for(lambda: _run(_caught_up(url)), 60, "the survivor decided the hour")
        first = _run(_fire_times(url))
        assert len(first) >= 59
        assert set(first.values()) == {1}, first.most_common(3)

        a = servers.start("a2", config)
        _run(_rewind(url, 150))  # again, over times partly decided already
        wait_for(lambda: _run(_caught_up(url)), 60, "both decided again")
        second = _run(_fire_times(url))
        assert len(second) >= 149
        assert set(second.values()) == {1}, second.most_common(3)
        # Every minute of the last 150 has its job, once.
        minutes = sorted(datetime.fromisoformat(t) for t in second)
        gaps = {later - earlier for earlier, later in pairwise(minutes)}
        assert gaps == {timedelta(minutes=1)}
        assert b.alive()
    finally:
        servers.close()
        drop_database_sync(postgres_admin_url, name)
