"""The fixtures that give each test hipq on a fake clock (docs/howto-test-jobs.md)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import billing_jobs
import pytest

from hipq.service import Service
from hipq.testing import FakeClock, manual_service

CONFIG = Path(__file__).resolve().parent / "config.yaml"


class FakeMailer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.down_for = 0  # the next sends that fail, as an outage would

    async def send(self, to: str, subject: str) -> None:
        if self.down_for:
            self.down_for -= 1
            raise ConnectionError("mail server unavailable")
        self.sent.append((to, subject))


@pytest.fixture
def mailer(monkeypatch: pytest.MonkeyPatch) -> FakeMailer:
    fake = FakeMailer()
    monkeypatch.setattr(billing_jobs, "mailer", fake)
    return fake


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 2, 1, 30, tzinfo=UTC))


@pytest.fixture
async def hipq(clock: FakeClock, tmp_path: Path) -> AsyncIterator[Service]:
    """The application's hipq, started; its jobs run only in run_until_idle."""
    url = os.environ.get("TEST_DATABASE_URL") or f"sqlite+aiosqlite:///{tmp_path}/hipq.db"
    async with manual_service(CONFIG, database_url=url, clock=clock) as service:
        yield service
