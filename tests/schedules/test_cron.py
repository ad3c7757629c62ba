"""Fire times of cron expressions in time zones: pure, no waiting in real time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hipq.schedules import Cron, ScheduleError, build_schedule, plan
from hipq.schedules.definition import job_fields

NOW = datetime(2025, 12, 31, 23, 0, tzinfo=UTC)


def _fires(cron: Cron, start: datetime, end: datetime) -> list[datetime]:
    out = []
    for fire in cron.fire_times(start):
        if fire > end:
            return out
        out.append(fire)
        assert len(out) < 10_000
    return out


def test_a_year_of_two_oclock_in_berlin_is_365_fire_times() -> None:
    cron = Cron.parse("0 2 * * *", "Europe/Berlin", NOW)
    fires = _fires(cron, NOW, datetime(2026, 12, 31, 23, 0, tzinfo=UTC))
    assert len(fires) == 365
    assert len({f.astimezone(cron.tz).date() for f in fires}) == 365


def test_spring_forward_the_missing_hour_fires_once_when_the_clock_jumps() -> None:
    cron = Cron.parse("30 2 * * *", "Europe/Berlin", NOW)
    day = _fires(cron, datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 29, 12, tzinfo=UTC))
    # 02:30 does not exist on 2026-03-29 (02:00 CET -> 03:00 CEST): once, at 03:30 CEST.
    assert day == [datetime(2026, 3, 29, 1, 30, tzinfo=UTC)]


def test_fall_back_the_repeated_hour_fires_once_at_its_first_occurrence() -> None:
    cron = Cron.parse("30 2 * * *", "Europe/Berlin", NOW)
    day = _fires(
        cron, datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 25, 12, tzinfo=UTC)
    )
    # 02:30 happens twice on 2026-10-25: 00:30 UTC (CEST) and 01:30 UTC (CET).
    assert day == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)]


def test_fall_back_an_hourly_schedule_does_not_fire_twice_at_one_wall_time() -> None:
    cron = Cron.parse("0 * * * *", "Europe/Berlin", NOW)
    night = _fires(
        cron, datetime(2026, 10, 24, 22, tzinfo=UTC), datetime(2026, 10, 25, 3, tzinfo=UTC)
    )
    walls = [f.astimezone(cron.tz).strftime("%H:%M") for f in night]
    assert walls == ["01:00", "02:00", "03:00", "04:00"]


@pytest.mark.parametrize(
    ("expression", "zone", "field", "words"),
    [
        ("0 0 30 2 *", "UTC", "cron", "never fires"),
        ("0 25 * * *", "UTC", "cron", "higher than the maximum"),
        ("0 2 * *", "UTC", "cron", "five fields"),
        ("banana 2 * * *", "UTC", "cron", "banana"),
        ("0 2 * * *", "Mars/Olympus", "timezone", "unknown IANA time zone"),
    ],
)
def test_bad_expressions_and_zones_name_the_field(
    expression: str, zone: str, field: str, words: str
) -> None:
    with pytest.raises(ScheduleError) as caught:
        Cron.parse(expression, zone, NOW)
    assert caught.value.field == field
    assert words in caught.value.message


def _schedule(**fields: object) -> object:
    base = {"cron": "0 * * * *", "timezone": "UTC", "job": {"type": "ok"}}
    return build_schedule("hourly", {**base, **fields}, NOW)


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [("none", []), ("latest", [12]), ("all", [8, 9, 10, 11, 12])],
)
def test_missed_fire_times_follow_catch_up_within_backfill(
    catch_up: str, expected: list[int]
) -> None:
    schedule = _schedule(catch_up=catch_up, backfill="5h")
    down_since = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
    now = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)
    decided = plan(schedule, down_since, now, on_time=60)  # type: ignore[arg-type]
    assert [f.hour for f in decided.fires] == expected
    assert decided.checked_until == now


def test_a_fire_time_within_on_time_is_made_whatever_catch_up_says() -> None:
    schedule = _schedule(catch_up="none")
    now = datetime(2026, 1, 1, 12, 0, 30, tzinfo=UTC)
    decided = plan(schedule, now - timedelta(hours=3), now, on_time=60)  # type: ignore[arg-type]
    assert [f.hour for f in decided.fires] == [12]


def test_the_template_sees_the_fire_time_and_the_job_records_it() -> None:
    schedule = build_schedule(
        "nightly",
        {
            "cron": "0 2 * * *",
            "timezone": "Europe/Berlin",
            "job": {
                "type": "ok",
                "payload": {"day": "{fire.date}", "n": 3},
                "job_key": "{schedule}-{fire.date}",
            },
        },
        NOW,
    )
    fire = datetime(2026, 7, 1, 0, 0, tzinfo=UTC)
    fields = job_fields(schedule, fire)
    assert fields["payload"] == {"day": "2026-07-01", "n": 3}
    assert fields["job_key"] == "nightly-2026-07-01"
    assert fields["labels"] == {"schedule": "nightly", "fire_time": "2026-07-01T00:00:00+00:00"}
    assert fields["run_at"] == fire


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"catch_up": "sometimes"}, "catch_up"),
        ({"overlap": "maybe"}, "overlap"),
        ({"backfill": "400d"}, "backfill"),
        ({"job": {"payload": {}}}, "job"),
        ({"job": {"type": "ok", "run_at": "2026-01-01T00:00:00Z"}}, "job.run_at"),
        ({"job": {"type": "ok", "payload": {"x": "{fire.tim"}}}, "job.payload.x"),
        ({"job": {"type": "ok", "labels": {"schedule": "x"}}}, "job.labels.schedule"),
    ],
)
def test_bad_schedule_fields_name_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        _schedule(**fields)
    assert caught.value.field == field


def test_an_idle_tick_has_nothing_to_store() -> None:
    schedule = _schedule(catch_up="all")
    now = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)
    decided = plan(schedule, now - timedelta(minutes=10), now, on_time=60)  # type: ignore[arg-type]
    assert decided.fires == [] and not decided.changes


def test_latest_after_a_year_down_makes_one_job_for_the_newest_minute() -> None:
    schedule = _schedule(cron="* * * * *", catch_up="latest", backfill="366d")
    now = datetime(2026, 6, 1, 12, 30, 10, tzinfo=UTC)
    decided = plan(schedule, now - timedelta(days=365), now, on_time=60)  # type: ignore[arg-type]
    assert decided.fires == [datetime(2026, 6, 1, 12, 30, tzinfo=UTC)]
    assert decided.missed and decided.checked_until == now


def test_all_decides_at_most_a_thousand_fire_times_per_tick() -> None:
    schedule = _schedule(cron="* * * * *", catch_up="all", backfill="2d")
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    decided = plan(schedule, now - timedelta(days=1), now, on_time=60)  # type: ignore[arg-type]
    assert len(decided.fires) == 1000
    assert decided.checked_until == decided.fires[-1] < now
    rest = plan(schedule, decided.checked_until, now, on_time=60)  # type: ignore[arg-type]
    assert len(rest.fires) == 24 * 60 - 1000 and rest.fires[0] > decided.fires[-1]
