"""`catch_up: all` after a long gap: the missed fire times become jobs in short
transactions (the API's requests get the database between them), and the log says
so in one summary line instead of one line per job. Both engines."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from hipq.observability.lifecycle_log import FIELDS_ATTR
from tests.api.conftest import open_api
from tests.support import FakeClock

START = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


async def test_a_long_backfill_is_many_short_transactions_and_one_log_line(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock(START)
    async with open_api(database_url, clock=clock) as api:
        created = await api.client.post(
            "/v1/schedules",
            json={
                "name": "every-minute",
                "cron": "* * * * *",
                "catch_up": "all",
                "backfill": "2d",
                "job": {"type": "ok"},
            },
        )
        assert created.status_code == 201, created.text
        scheduler = api.service.scheduler
        assert scheduler is not None
        clock.now = START + timedelta(hours=10)  # 600 fire times missed
        commits: list[object] = []
        engine = api.service.store.engine.sync_engine

        def committed(conn: object) -> None:
            commits.append(conn)

        event.listen(engine, "commit", committed)
        try:
            with caplog.at_level(logging.INFO, logger="hipq.lifecycle"):
                results = await scheduler.run_once()
        finally:
            event.remove(engine, "commit", committed)
        assert len(results) == 600
        assert len(commits) >= 10  # not one transaction of 600 fire times
        lines = [r.getMessage() for r in caplog.records if r.name == "hipq.lifecycle"]
        # The fire times within on_time (60 s) are on time: a line each.
        assert len([m for m in lines if "schedule_fired" in m]) <= 2, lines[:5]
        (summary,) = [
            getattr(r, FIELDS_ATTR)
            for r in caplog.records
            if r.name == "hipq.lifecycle" and r.getMessage() == "schedule_backfilled"
        ]
        assert summary["jobs"] == 598 and summary["schedule"] == "every-minute", summary
        listed = await api.client.get(
            "/v1/jobs", params={"label": "schedule:every-minute", "limit": 1000}
        )
        assert len(listed.json()["jobs"]) == 600
        # Decided once: the next tick makes nothing more.
        assert await scheduler.run_once() == []
