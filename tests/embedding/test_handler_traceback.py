"""A failing python handler's traceback is kept on its attempt (bounded), answered by
GET /v1/jobs/{id}'s body and logged once, in the failed attempt's lifecycle line; on
both engines."""

from __future__ import annotations

import logging

import pytest

from hipq.api.models import job_body
from hipq.observability.lifecycle_log import ConsoleFormatter
from hipq.testing import FakeClock, manual_service, run_until_idle
from hipq.transports.python import TRACEBACK_MAX_CHARS, handler_traceback
from tests.support import make_settings


async def test_a_failed_attempt_keeps_and_logs_its_traceback_once(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="hipq")
    svc = manual_service(make_settings(database_url), clock=FakeClock())
    async with svc:
        job = await svc.add_job("permanent")
        await run_until_idle(svc)
        [attempt] = await svc.store.job_attempts(job.id)
    assert attempt.traceback is not None
    assert 'tests/handlers.py", line' in attempt.traceback
    assert "in permanent" in attempt.traceback
    assert attempt.traceback.rstrip().endswith("PermanentError: will never work")
    assert "_run" not in attempt.traceback  # hipq's own frame is left out
    [shown] = job_body(job, [attempt])["attempts"]
    assert shown["traceback"] == attempt.traceback
    logged = [r for r in caplog.records if "in permanent" in ConsoleFormatter().format(r)]
    assert len(logged) == 1, [r.getMessage() for r in caplog.records]


def _deep(n: int) -> None:
    if n:
        _deep(n - 1)
    raise ValueError("at the bottom")


def _chained(n: int) -> None:
    try:
        _deep(2)
    except ValueError as exc:
        if n:
            try:
                _chained(n - 1)
            except ValueError as inner:
                raise inner from exc
        raise


def test_a_deep_traceback_keeps_its_innermost_frames() -> None:
    try:
        _chained(200)
    except ValueError as exc:
        text = handler_traceback(exc)
    assert len(text) == TRACEBACK_MAX_CHARS
    assert text.startswith("... (earlier frames cut)")
    assert text.rstrip().endswith("ValueError: at the bottom")
    assert "in _deep" in text
