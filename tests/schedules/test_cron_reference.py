"""hipq's fire times against a reference crontab implementation (cronsim, as Debian's
cron reads an expression): a year of fire times must be the same instants.

Day of week: Sunday is 0 or 7; day of month and day of week both restricted match
either (crontab's OR), unless one of them starts with ``*``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from hipq.schedules import Cron, ScheduleError
from hipq.schedules.cron import weekdays

# A year with a 29 February in it.
START = datetime(2027, 7, 1, tzinfo=UTC)
END = datetime(2028, 7, 1, tzinfo=UTC)

EXPRESSIONS = [
    "0 12 * * 0",
    "0 12 * * 7",
    "0 12 * * 1-5",
    "0 12 * * 0,6",
    "0 12 * * 6,0",
    "0 12 * * 5-7",
    "0 12 * * 0-7",
    "0 12 * * */2",
    "0 12 * * */3",
    "0 12 * * 1/2",
    "0 12 * * 1-7/2",
    "0 12 * * 0-6/3",
    "0 12 * * sun",
    "0 12 * * SUN",
    "0 12 * * sat",
    "0 12 * * mon-fri",
    "0 12 * * Mon-Fri",
    "0 12 * * mon,wed,fri",
    "0 12 * * sun-sat",
    "0 12 * * 1,3-4,sat",
    "15 9,17 * * 1-5",
    "*/30 8-10 * * 2",
    # day of month and day of week both restricted: either matches (OR)
    "0 0 1 * mon",
    "0 0 13 * 5",
    "0 0 1,15 * 0",
    "0 0 1-7 * 1",
    "0 6 31 * 2",
    "0 0 29 2 mon",
    "0 0 1 1 7",
    # one of them starts with *: both must match (AND)
    "0 0 */2 * 1",
    "0 0 1-7 * */2",
    "0 0 * * 3",
    "0 0 1 * *",
    "30 4 1 jan,jul *",
    "0 0 * */3 sun",
    "0 0 29 2 *",
    "5 4 * * *",
]


def _ours(expression: str, zone: str) -> list[datetime]:
    cron = Cron.parse(expression, zone, START)
    out = []
    for fire in cron.fire_times(START):
        if fire >= END:
            return out
        out.append(fire)
    return out


def _reference(expression: str, zone: str) -> list[datetime]:
    out = []
    for fire in CronSim(expression, START.astimezone(ZoneInfo(zone))):
        if fire >= END:
            return out
        out.append(fire.astimezone(UTC))
    return out


@pytest.mark.parametrize("expression", EXPRESSIONS)
@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo"])  # Tokyo: the local day, no DST
def test_a_year_of_fire_times_is_the_reference_crontab_s(expression: str, zone: str) -> None:
    ours = _ours(expression, zone)
    assert ours, expression
    assert ours == _reference(expression, zone)


def test_sunday_is_zero_and_seven_and_monday_one() -> None:
    fires = _ours("0 12 * * 0", "UTC")
    assert {f.strftime("%A") for f in fires} == {"Sunday"}
    assert _ours("0 12 * * 7", "UTC") == fires
    workdays = {f.strftime("%A") for f in _ours("0 12 * * 1-5", "UTC")}
    assert workdays == {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday"}


@pytest.mark.parametrize(
    ("spec", "days"),
    [
        ("*", {0, 1, 2, 3, 4, 5, 6}),
        ("*/2", {0, 2, 4, 6}),
        ("5-7", {5, 6, 0}),
        ("7", {0}),
        ("sun", {0}),
        ("mon-fri", {1, 2, 3, 4, 5}),
        ("1/3", {1, 4, 7 % 7}),
    ],
)
def test_day_of_week_fields_name_crontab_days(spec: str, days: set[int]) -> None:
    assert weekdays(spec) == days


@pytest.mark.parametrize("spec", ["8", "sat-sun", "5-1", "*/0", "funday", "1#2", "5L", ""])
def test_day_of_week_fields_crontab_refuses_are_refused(spec: str) -> None:
    with pytest.raises(ScheduleError) as refused:
        Cron.parse(f"0 12 * * {spec}" if spec else "0 12 * *", "UTC", START)
    assert refused.value.field == "cron"


def _steps_of_search(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts CronTrigger's field increments: the work of its search, without a clock."""
    from apscheduler.triggers.cron import CronTrigger

    steps = [0]
    increment = CronTrigger._increment_field_value

    def counted(self: CronTrigger, dateval: datetime, fieldnum: int) -> object:
        steps[0] += 1
        return increment(self, dateval, fieldnum)

    monkeypatch.setattr(CronTrigger, "_increment_field_value", counted)
    return steps


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 */7"])
def test_an_expression_that_never_fires_is_refused_after_a_bounded_search(
    monkeypatch: pytest.MonkeyPatch, expression: str
) -> None:
    steps = _steps_of_search(monkeypatch)
    with pytest.raises(ScheduleError, match="never fires") as refused:
        Cron.parse(expression, "Europe/Berlin", START)
    assert refused.value.field == "cron"
    # Searched to the year 9999 that was ~8000 years of steps; now about ten years.
    assert steps[0] < 200


def test_fire_times_end_where_the_next_is_further_than_the_bound() -> None:
    # 29 February of 2096, then 2104 (2100 is no leap year): eight years is within it.
    cron = Cron.parse("0 0 29 2 *", "UTC", START)
    after = datetime(2096, 3, 1, tzinfo=UTC)
    assert cron.next_after(after) == datetime(2104, 2, 29, tzinfo=UTC)
