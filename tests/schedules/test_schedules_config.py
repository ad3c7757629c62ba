"""A bad schedule in the config stops hipq at start with one line naming the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hipq.config import ConfigError
from hipq.process.wiring import ServiceError, build_parts
from tests.support import make_settings


def _settings(tmp_path: Path, schedule: dict[str, Any]) -> Any:
    base = {"cron": "0 2 * * *", "job": {"type": "ok"}}
    return make_settings(
        f"sqlite+aiosqlite:///{tmp_path}/hipq.db", schedules={"nightly": {**base, **schedule}}
    )


@pytest.mark.parametrize(
    ("schedule", "line"),
    [
        ({"cron": "0 0 30 2 *"}, "schedules.nightly.cron: '0 0 30 2 *' never fires"),
        ({"cron": "0 2 * * mon-xyz"}, "schedules.nightly.cron: '0 2 * * mon-xyz'"),
        ({"timezone": "Europe/Nowhere"}, "schedules.nightly.timezone: unknown IANA time zone"),
        # a folder of the tz database, not a zone
        ({"timezone": "Europe"}, "schedules.nightly.timezone: unknown IANA time zone"),
        ({"timezone": "Etc"}, "schedules.nightly.timezone: unknown IANA time zone"),
        ({"cron": "0 2 * * 8"}, "schedules.nightly.cron: '0 2 * * 8': day of week"),
        ({"job": {"type": "nope"}}, "schedules.nightly.job.type: unknown job type 'nope'"),
        ({"catch_up": "sometimes"}, "schedules.nightly.catch_up: Input should be"),
        ({"backfill": "2y"}, "schedules.nightly.backfill"),
        ({"overlap": "queue"}, "schedules.nightly.overlap: Input should be"),
        ({"pause_on_failure": "often"}, "schedules.nightly.pause_on_failure:"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(
    tmp_path: Path, schedule: dict[str, Any], line: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _settings(tmp_path, schedule)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"config error: {line}"), message


@pytest.mark.parametrize(
    ("job", "line"),
    [
        ({"type": "ok", "queue": "elsewhere"}, "schedules.nightly.job.queue: unknown queue"),
        ({"type": "ok", "priority": "high"}, "schedules.nightly.job.priority:"),
        ({"type": "ok", "payload": {"d": "{fire.day}"}}, "schedules.nightly.job.payload.d:"),
    ],
)
def test_a_job_template_is_checked_at_start_as_a_post_would_be(
    tmp_path: Path, job: dict[str, Any], line: str
) -> None:
    settings = _settings(tmp_path, {"job": job})
    with pytest.raises(ServiceError) as caught:
        build_parts(settings)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"config error: {line}"), message
