"""A queue's loop through database faults: a tick whose COMMIT's reply was lost is
followed by a re-read of what the loop owns (its claims run, its settlements count
once), and a run of failed ticks is logged as one fault, not a traceback per tick."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from hipq.batch_loop.loop import QueueLoop
from hipq.process.upkeep import Upkeep
from hipq.store import Store
from tests.api.conftest import Api, open_api
from tests.support import eventually


def lose_commit_reply_once(store: Store, when: Callable[[], Awaitable[bool]]) -> list[int]:
    """The first tick after which ``when()`` holds commits, yet the loop sees an error
    (the database's reply to COMMIT never arrived). Returns the count of ticks begun."""
    real = store.queue_batch
    lost = False
    ticks = [0]

    @asynccontextmanager
    async def batch(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        nonlocal lost
        ticks[0] += 1
        async with real(*args, **kwargs) as opened:
            yield opened
        if not lost and await when():
            lost = True
            raise ConnectionResetError("connection reset while reading the reply to COMMIT")

    store.queue_batch = batch  # type: ignore[method-assign]
    return ticks


async def history(api: Api, job_id: int) -> list[tuple[int, str]]:
    return [(a["attempt"], a["outcome"]) for a in (await api.job(job_id))["attempts"]]


async def completed(api: Api, job_id: int) -> bool:
    return bool((await api.job(job_id))["state"] == "completed")


async def test_jobs_claimed_by_a_tick_whose_commit_reply_was_lost_still_run(
    database_url: str,
) -> None:
    async with open_api(database_url, run_loops=True) as api:
        store = api.service.store

        async def claimed() -> bool:
            return bool(await store.job_in_flight("default"))

        lose_commit_reply_once(store, claimed)
        job = await api.post_job(type="ok")
        await eventually(lambda: completed(api, job["id"]), timeout=60)
        assert await history(api, job["id"]) == [(1, "completed")]


async def test_a_settlement_whose_commit_reply_was_lost_is_recorded_once(
    database_url: str,
) -> None:
    async with open_api(database_url, run_loops=True) as api:
        store = api.service.store
        posted: list[int] = []

        async def settled() -> bool:
            return bool(posted) and bool(await store.job_attempts(posted[0]))

        ticks = lose_commit_reply_once(store, settled)
        posted.append((await api.post_job(type="ok"))["id"])
        await eventually(lambda: completed(api, posted[0]), timeout=60)
        # A few ticks after the lost reply: a second settlement would have been written.
        target = ticks[0] + 3
        await eventually(lambda: _ticked(api.loop(), ticks, target), timeout=60)
        assert await history(api, posted[0]) == [(1, "completed")]


def _ticked(loop: QueueLoop, ticks: list[int], count: int) -> bool:
    loop.wake.set()
    return ticks[0] >= count


async def test_failing_ticks_are_one_fault_in_the_log(
    sqlite_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_api(sqlite_url) as api:
        loop = api.loop()
        assert await loop.acquire()
        failures = 0

        def fail(statement: str) -> OperationalError:
            nonlocal failures
            failures += 1
            if failures > 20:
                loop.request_stop()
            return OperationalError(statement, {}, sqlite3.OperationalError("database is locked"))

        @asynccontextmanager
        async def down(*_a: Any, **_k: Any) -> AsyncIterator[Any]:
            raise fail("BEGIN IMMEDIATE")
            yield  # pragma: no cover

        async def down_read(*_a: Any, **_k: Any) -> Any:
            raise fail("SELECT")

        async def no_wait(_seconds: float) -> None:
            return None

        monkeypatch.setattr(api.service.store, "queue_batch", down)
        monkeypatch.setattr(api.service.store, "job_in_flight", down_read)
        monkeypatch.setattr(loop, "rest", no_wait)
        with caplog.at_level(logging.INFO, logger="hipq"):
            await loop.run()
        assert failures > 20
        lines = [r for r in caplog.records if r.name == "hipq.batch_loop.loop"]
        assert len(lines) == 1, [r.getMessage() for r in lines]
        assert "database unavailable" in lines[0].getMessage()
        assert "database is locked" in lines[0].getMessage()
        assert lines[0].exc_info is None


async def test_failing_upkeep_is_one_fault_then_one_recovery_line(
    sqlite_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_api(sqlite_url) as api:
        await api.service.upkeep.stop()  # this test runs its own
        calls = 0
        real = api.service.store.response_classify
        upkeep = Upkeep(
            api.service.settings, api.service.store, api.clock, api.service.events, interval=0
        )

        async def classify(now: Any) -> dict[str, int]:
            nonlocal calls
            calls += 1
            if calls <= 20:
                full = sqlite3.OperationalError("database or disk is full")
                raise OperationalError("UPDATE", {}, full)
            if calls >= 25:
                upkeep.request_stop()
            return await real(now)

        monkeypatch.setattr(api.service.store, "response_classify", classify)
        with caplog.at_level(logging.INFO, logger="hipq"):
            await upkeep.run()
        lines = [r.getMessage() for r in caplog.records if r.name == "hipq.process.upkeep"]
        assert len(lines) == 2, lines
        assert "database or disk is full" in lines[0] and "recovered after 20" in lines[1]
