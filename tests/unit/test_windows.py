"""Time-of-day windows: parsing, wrap-midnight, DST days and brute-force properties."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipq.windows import (
    ALL_DAYS,
    Window,
    WindowError,
    current_closing,
    is_open,
    next_opening,
    parse_windows,
)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def one(**fields: Any) -> tuple[Window, ...]:
    return parse_windows([fields])


# --- parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"start": "5am", "end": "07:00"}, "windows[0].start: expected 'HH:MM' or 'HH:MM:SS'"),
        ({"start": "25:00", "end": "07:00"}, "windows[0].start: not a time of day"),
        ({"start": "05:00", "end": "07:60"}, "windows[0].end: not a time of day"),
        ({"start": "05:00", "end": 7}, "windows[0].end: expected 'HH:MM'"),
        ({"end": "07:00"}, "windows[0].start: required"),
        ({"start": "05:00"}, "windows[0].end: required"),
        ({"start": "05:00", "end": "05:00"}, "windows[0].end: must differ from start"),
        ({"start": "05:00", "end": "07:00", "tz": "Mars/Olympus"}, "windows[0].tz: unknown"),
        ({"start": "05:00", "end": "07:00", "tz": "../etc/passwd"}, "windows[0].tz: unknown"),
        ({"start": "05:00", "end": "07:00", "tz": 3}, "windows[0].tz: expected a time zone"),
        ({"start": "05:00", "end": "07:00", "tz": ["UTC"]}, "windows[0].tz: expected a time"),
        ({"start": "05:00", "end": "07:00", "days": "mon-fry"}, "windows[0].days: unknown day"),
        ({"start": "05:00", "end": "07:00", "days": "monday"}, "windows[0].days: unknown day"),
        ({"start": "05:00", "end": "07:00", "days": []}, "windows[0].days: must name"),
        ({"start": "05:00", "end": "07:00", "days": 5}, "windows[0].days: expected"),
        ({"start": "05:00", "end": "07:00", "days": [1]}, "windows[0].days: expected day"),
        ({"start": "05:00", "end": "07:00", "timezone": "UTC"}, "windows[0].timezone: unknown"),
        ("05:00-07:00", "windows[0]: expected an object"),
    ],
)
def test_parse_errors_name_the_field(raw: Any, message: str) -> None:
    with pytest.raises(WindowError) as info:
        parse_windows([raw])
    assert str(info.value).startswith(message)


def test_parse_error_names_the_index() -> None:
    raw = [
        {"start": "05:00", "end": "07:00"},
        {"start": "22:00", "end": "02:00", "tz": "Mars/Olympus"},
    ]
    with pytest.raises(ValueError, match=r"^windows\[1\]\.tz: unknown time zone 'Mars/Olympus'$"):
        parse_windows(raw)


@pytest.mark.parametrize("raw", [{"start": "05:00", "end": "07:00"}, "x", 5])
def test_windows_must_be_a_list(raw: Any) -> None:
    with pytest.raises(WindowError, match=r"^windows: expected a list"):
        parse_windows(raw)


def test_defaults_and_empty() -> None:
    assert parse_windows(None) == ()
    assert parse_windows([]) == ()
    (w,) = one(start="05:00", end="07:00")
    assert (w.start, w.end, w.tz, w.days) == (time(5), time(7), "UTC", ALL_DAYS)
    (w,) = one(start="5:00", end="07:00:30", tz=None, days=None)
    assert (w.start, w.end, w.tz, w.days) == (time(5), time(7, 0, 30), "UTC", ALL_DAYS)


@pytest.mark.parametrize(
    ("days", "expected", "canonical"),
    [
        ("mon-fri", {0, 1, 2, 3, 4}, "mon-fri"),
        ("sat,sun", {5, 6}, "sat,sun"),
        ("mon,wed-fri", {0, 2, 3, 4}, "mon,wed-fri"),
        (["mon", "tue"], {0, 1}, "mon,tue"),
        (" Mon , WED ", {0, 2}, "mon,wed"),
        ("fri-mon", {4, 5, 6, 0}, "mon,fri-sun"),
        (["sat-sun", "tue"], {1, 5, 6}, "tue,sat,sun"),
    ],
)
def test_days(days: Any, expected: set[int], canonical: str) -> None:
    (w,) = one(start="05:00", end="07:00", days=days)
    assert w.days == frozenset(expected)
    assert w.to_dict()["days"] == canonical


def test_to_dict_round_trips() -> None:
    raw = [
        {"start": "05:00", "end": "07:00", "tz": "Europe/Berlin", "days": "mon-fri"},
        {"start": "22:00:15", "end": "02:00", "tz": "UTC"},
    ]
    windows = parse_windows(raw)
    assert [w.to_dict() for w in windows] == raw
    assert parse_windows([w.to_dict() for w in windows]) == windows
    assert str(windows[0]) == "05:00-07:00 Europe/Berlin mon-fri"


def test_window_validates_direct_construction() -> None:
    with pytest.raises(WindowError):
        Window(time(5), time(5))
    with pytest.raises(WindowError):
        Window(time(5), time(6), days=frozenset())
    with pytest.raises(WindowError, match="unknown time zone"):
        Window(time(5), time(6), tz="Mars/Olympus")
    built = Window(time(5), time(6), days={0, 1})  # type: ignore[arg-type]
    assert hash(built) == hash(Window(time(5), time(6), days=frozenset({0, 1})))


def test_naive_instants_are_refused() -> None:
    windows = one(start="05:00", end="07:00")
    with pytest.raises(ValueError, match="timezone-aware"):
        is_open(windows, datetime(2026, 1, 1, 6))
    with pytest.raises(ValueError, match="timezone-aware"):
        next_opening(windows, datetime(2026, 1, 1, 6))


# --- queries -----------------------------------------------------------------------------


def test_no_windows_is_always_open() -> None:
    at = utc("2026-01-01T03:00Z")
    assert is_open((), at)
    assert next_opening((), at) == at
    assert current_closing((), at) is None


def test_simple_window_in_a_zone() -> None:
    windows = one(start="05:00", end="07:00", tz="Europe/Berlin", days="mon-fri")
    # 2026-01-02 is a Friday; Berlin is UTC+1 in winter.
    assert not is_open(windows, utc("2026-01-02T03:59:59Z"))
    assert is_open(windows, utc("2026-01-02T04:00Z"))
    assert not is_open(windows, utc("2026-01-02T06:00Z"))
    assert next_opening(windows, utc("2026-01-02T03:00Z")) == utc("2026-01-02T04:00Z")
    assert current_closing(windows, utc("2026-01-02T05:00Z")) == utc("2026-01-02T06:00Z")
    assert current_closing(windows, utc("2026-01-02T07:00Z")) is None
    # After Friday's window the next one is Monday's.
    assert next_opening(windows, utc("2026-01-02T06:00Z")) == utc("2026-01-05T04:00Z")


def test_wrap_midnight_counts_from_the_opening_day() -> None:
    windows = one(start="22:00", end="02:00", days="fri")
    assert is_open(windows, utc("2026-01-02T22:00Z"))  # Friday
    assert is_open(windows, utc("2026-01-03T01:59:59Z"))  # Saturday, still Friday's window
    assert not is_open(windows, utc("2026-01-03T02:00Z"))
    assert not is_open(windows, utc("2026-01-03T22:30Z"))  # Saturday's evening: not listed
    assert not is_open(windows, utc("2026-01-02T01:00Z"))  # Friday's early hours: Thursday's
    assert not is_open(windows, utc("2026-01-01T23:00Z"))  # Thursday
    assert current_closing(windows, utc("2026-01-02T23:00Z")) == utc("2026-01-03T02:00Z")
    assert next_opening(windows, utc("2026-01-03T03:00Z")) == utc("2026-01-09T22:00Z")
    assert next_opening(windows, utc("2026-01-03T01:00Z")) == utc("2026-01-03T01:00Z")


def test_end_at_midnight() -> None:
    windows = one(start="20:00", end="00:00", days="sun")
    assert is_open(windows, utc("2026-01-04T23:59Z"))
    assert current_closing(windows, utc("2026-01-04T21:00Z")) == utc("2026-01-05T00:00Z")


def test_earliest_of_several_windows_in_different_zones() -> None:
    windows = parse_windows(
        [
            {"start": "09:00", "end": "10:00", "tz": "America/New_York"},  # 14:00Z in winter
            {"start": "13:00", "end": "14:00", "tz": "Europe/Berlin"},  # 12:00Z in winter
        ]
    )
    assert next_opening(windows, utc("2026-01-05T11:00Z")) == utc("2026-01-05T12:00Z")
    assert next_opening(windows, utc("2026-01-05T13:00Z")) == utc("2026-01-05T14:00Z")


def test_windows_that_cover_every_instant_never_close() -> None:
    windows = parse_windows(
        [{"start": "00:00", "end": "12:00"}, {"start": "12:00", "end": "00:00"}]
    )
    assert current_closing(windows, utc("2026-01-05T11:00Z")) is None


def test_overlapping_windows_close_when_the_union_ends() -> None:
    windows = parse_windows(
        [{"start": "05:00", "end": "07:00"}, {"start": "06:00", "end": "08:00"}]
    )
    assert current_closing(windows, utc("2026-01-05T05:30Z")) == utc("2026-01-05T08:00Z")


def test_result_is_utc() -> None:
    at = datetime(2026, 1, 5, 6, tzinfo=ZoneInfo("Europe/Berlin"))
    result = next_opening(one(start="06:30", end="07:00", tz="Europe/Berlin"), at)
    assert result == utc("2026-01-05T05:30Z")
    assert result.utcoffset() == timedelta(0)


# --- DST ---------------------------------------------------------------------------------
# Europe/Berlin: 2026-03-29 01:00Z 02:00 CET -> 03:00 CEST; 2026-10-25 01:00Z 03:00 -> 02:00.
# America/New_York: 2026-03-08 07:00Z 02:00 EST -> 03:00 EDT; 2026-11-01 06:00Z 02:00 -> 01:00.


def test_berlin_spring_start_in_gap_opens_at_gap_end() -> None:
    windows = one(start="02:30", end="04:00", tz="Europe/Berlin")
    assert next_opening(windows, utc("2026-03-28T23:00Z")) == utc("2026-03-29T01:00Z")
    assert not is_open(windows, utc("2026-03-29T00:59:59Z"))
    assert current_closing(windows, utc("2026-03-29T01:00Z")) == utc("2026-03-29T02:00Z")
    # Ordinary days either side: 02:30 local.
    assert next_opening(windows, utc("2026-03-27T23:00Z")) == utc("2026-03-28T01:30Z")
    assert next_opening(windows, utc("2026-03-29T23:00Z")) == utc("2026-03-30T00:30Z")


def test_berlin_spring_end_in_gap_closes_at_gap_end() -> None:
    windows = one(start="01:00", end="02:30", tz="Europe/Berlin", days="sun")
    assert next_opening(windows, utc("2026-03-28T12:00Z")) == utc("2026-03-29T00:00Z")
    assert current_closing(windows, utc("2026-03-29T00:30Z")) == utc("2026-03-29T01:00Z")
    assert not is_open(windows, utc("2026-03-29T01:00Z"))


def test_berlin_spring_window_inside_gap_skips_the_day() -> None:
    windows = one(start="02:10", end="02:40", tz="Europe/Berlin", days="sun")
    assert next_opening(windows, utc("2026-03-29T00:00Z")) == utc("2026-04-05T00:10Z")


def test_berlin_fall_repeated_hour_counts_twice() -> None:
    windows = one(start="02:00", end="02:30", tz="Europe/Berlin", days="sun")
    assert next_opening(windows, utc("2026-10-24T23:00Z")) == utc("2026-10-25T00:00Z")  # 1st
    assert current_closing(windows, utc("2026-10-25T00:10Z")) == utc("2026-10-25T00:30Z")
    assert not is_open(windows, utc("2026-10-25T00:45Z"))
    assert next_opening(windows, utc("2026-10-25T00:45Z")) == utc("2026-10-25T01:00Z")  # 2nd
    assert current_closing(windows, utc("2026-10-25T01:00Z")) == utc("2026-10-25T01:30Z")
    assert next_opening(windows, utc("2026-10-25T01:30Z")) == utc("2026-11-01T01:00Z")


def test_berlin_fall_window_across_the_repeated_hour() -> None:
    windows = one(start="02:30", end="03:30", tz="Europe/Berlin", days="sun")
    assert next_opening(windows, utc("2026-10-24T23:00Z")) == utc("2026-10-25T00:30Z")
    # At 01:00Z the clock goes back to 02:00, before the start: closed until 02:30 again.
    assert current_closing(windows, utc("2026-10-25T00:30Z")) == utc("2026-10-25T01:00Z")
    assert next_opening(windows, utc("2026-10-25T01:00Z")) == utc("2026-10-25T01:30Z")
    assert current_closing(windows, utc("2026-10-25T01:30Z")) == utc("2026-10-25T02:30Z")


def test_berlin_fall_window_ending_in_repeated_hour_reopens_at_the_change() -> None:
    windows = one(start="01:00", end="02:30", tz="Europe/Berlin", days="sun")
    assert next_opening(windows, utc("2026-10-24T12:00Z")) == utc("2026-10-24T23:00Z")
    assert current_closing(windows, utc("2026-10-24T23:00Z")) == utc("2026-10-25T00:30Z")
    assert next_opening(windows, utc("2026-10-25T00:30Z")) == utc("2026-10-25T01:00Z")
    assert current_closing(windows, utc("2026-10-25T01:00Z")) == utc("2026-10-25T01:30Z")


def test_new_york_spring() -> None:
    starts_in_gap = one(start="02:30", end="03:30", tz="America/New_York", days="sun")
    assert next_opening(starts_in_gap, utc("2026-03-08T05:00Z")) == utc("2026-03-08T07:00Z")
    assert current_closing(starts_in_gap, utc("2026-03-08T07:00Z")) == utc("2026-03-08T07:30Z")
    ends_in_gap = one(start="01:30", end="02:30", tz="America/New_York", days="sun")
    assert next_opening(ends_in_gap, utc("2026-03-08T05:00Z")) == utc("2026-03-08T06:30Z")
    assert current_closing(ends_in_gap, utc("2026-03-08T06:30Z")) == utc("2026-03-08T07:00Z")
    # Saturday night's wrap-midnight window ends in Sunday's gap.
    wraps = one(start="22:00", end="02:30", tz="America/New_York", days="sat")
    assert next_opening(wraps, utc("2026-03-07T12:00Z")) == utc("2026-03-08T03:00Z")
    assert current_closing(wraps, utc("2026-03-08T05:00Z")) == utc("2026-03-08T07:00Z")


def test_new_york_fall() -> None:
    windows = one(start="01:00", end="01:30", tz="America/New_York", days="sun")
    assert next_opening(windows, utc("2026-11-01T00:00Z")) == utc("2026-11-01T05:00Z")
    assert current_closing(windows, utc("2026-11-01T05:00Z")) == utc("2026-11-01T05:30Z")
    assert next_opening(windows, utc("2026-11-01T05:30Z")) == utc("2026-11-01T06:00Z")
    assert current_closing(windows, utc("2026-11-01T06:00Z")) == utc("2026-11-01T06:30Z")
    wraps = one(start="23:00", end="01:30", tz="America/New_York", days="sat")
    assert next_opening(wraps, utc("2026-10-31T12:00Z")) == utc("2026-11-01T03:00Z")
    assert current_closing(wraps, utc("2026-11-01T03:00Z")) == utc("2026-11-01T05:30Z")
    assert next_opening(wraps, utc("2026-11-01T05:30Z")) == utc("2026-11-01T06:00Z")
    assert current_closing(wraps, utc("2026-11-01T06:00Z")) == utc("2026-11-01T06:30Z")


# --- properties --------------------------------------------------------------------------

# Zones chosen for awkward rules: 30-minute DST (Lord_Howe), DST at midnight (Santiago,
# Havana), odd offsets (Kathmandu, Chatham, St_Johns), extra yearly changes (Casablanca).
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "America/Havana",
    "Asia/Kathmandu",
    "Pacific/Chatham",
    "America/St_Johns",
    "Africa/Casablanca",
    "Europe/London",
]


def _offset_changes_2026(name: str) -> list[datetime]:
    # To the hour: the tests only need instants near each change.
    zone, at, out = ZoneInfo(name), datetime(2026, 1, 1, tzinfo=UTC), []
    before = at.astimezone(zone).utcoffset()
    while at.year == 2026:
        at += timedelta(hours=1)
        after = at.astimezone(zone).utcoffset()
        if after != before:
            out.append(at)
        before = after
    return out


CHANGES = {name: _offset_changes_2026(name) for name in ZONES}

# Minutes of day, biased towards the hours DST usually moves.
minutes_of_day = st.one_of(
    st.integers(0, 1439), st.sampled_from([0, 30, 60, 90, 120, 135, 150, 180, 210, 1380, 1410])
)


@st.composite
def raw_window(
    draw: st.DrawFn, zone: str, minutes: st.SearchStrategy[int] = minutes_of_day
) -> dict[str, Any]:
    start = draw(minutes)
    end = draw(minutes.filter(lambda m: m != start))
    every_day = st.just(frozenset(range(7)))
    days = draw(st.one_of(every_day, st.frozensets(st.integers(0, 6), min_size=1)))
    names = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    return {
        "start": f"{start // 60:02d}:{start % 60:02d}",
        "end": f"{end // 60:02d}:{end % 60:02d}",
        "tz": zone,
        "days": [names[d] for d in sorted(days)],
    }


@st.composite
def case(draw: st.DrawFn) -> tuple[list[dict[str, Any]], datetime]:
    """1-3 windows, mostly in one zone, and an instant; often both close to a DST change."""
    zone = draw(st.sampled_from(ZONES))
    changes = CHANGES[zone]
    minutes = minutes_of_day
    if changes and draw(st.integers(0, 3)):
        base = draw(st.sampled_from(changes))
        # Within hours of the change, windows touching the skipped or repeated wall
        # times: that is where DST mistakes show.
        local = base.astimezone(ZoneInfo(zone))
        centre = local.hour * 60 + local.minute
        minutes = st.integers(-180, 180).map(lambda d: (centre + d) % 1440)
        spread = draw(st.sampled_from([3 * 3600, 12 * 3600, 2 * 86400]))
        at = base + timedelta(seconds=draw(st.integers(-spread, spread)))
    else:
        uniform = st.datetimes(datetime(2025, 1, 1), datetime(2027, 12, 31))
        at = draw(uniform.map(lambda t: t.replace(tzinfo=UTC)))
    raws = draw(st.lists(raw_window(zone, minutes), min_size=1, max_size=3))
    if draw(st.booleans()):
        raws.append(draw(st.sampled_from(ZONES).flatmap(raw_window)))
    return raws, at


def brute_is_open(raws: list[dict[str, Any]], at: datetime) -> bool:
    """Look up at's wall-clock minute of the week in each window's walked-out minutes."""
    for raw in raws:
        local = at.astimezone(ZoneInfo(raw["tz"]))
        here = local.weekday() * 1440 + local.hour * 60 + local.minute
        if here in _week_minutes(raw["start"], raw["end"], tuple(raw["days"])):
            return True
    return False


@functools.lru_cache(maxsize=1024)
def _week_minutes(start: str, end: str, days: tuple[str, ...]) -> frozenset[int]:
    """Every minute of the week a window covers, found by stepping minute by minute."""
    names = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    first, last = int(start[:2]) * 60 + int(start[3:]), int(end[:2]) * 60 + int(end[3:])
    covered: set[int] = set()
    for day in days:
        minute = names.index(day) * 1440 + first
        while minute % 1440 != last:
            covered.add(minute % (7 * 1440))
            minute += 1
    return frozenset(covered)


# No example database: the tests write no files.
PROPERTY = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@PROPERTY
@given(case())
def test_is_open_matches_brute_force(data: tuple[list[dict[str, Any]], datetime]) -> None:
    raws, at = data
    windows = parse_windows(raws)
    assert is_open(windows, at) == brute_is_open(raws, at)


@PROPERTY
@given(case(), st.lists(st.floats(0, 1, exclude_min=True, exclude_max=True), max_size=20))
def test_next_opening_is_the_first_open_instant(
    data: tuple[list[dict[str, Any]], datetime], fractions: list[float]
) -> None:
    raws, at = data
    windows = parse_windows(raws)
    found = next_opening(windows, at)
    assert found >= at
    assert found.utcoffset() == timedelta(0)
    assert is_open(windows, found)
    assert brute_is_open(raws, found)
    if found == at:
        return
    gap = found - at
    probes = [at, found - timedelta(microseconds=1), found - timedelta(seconds=1)]
    probes += [at + gap * (i / 200) for i in range(1, 200)]
    probes += [at + gap * f for f in fractions]
    # Every minute of the first hours too, where a DST change near ``at`` would show.
    probes += [at + timedelta(minutes=m) for m in range(1, 361)]
    for probe in probes:
        if at <= probe < found:
            assert not is_open(windows, probe), probe
            assert not brute_is_open(raws, probe), probe


@PROPERTY
@given(case())
def test_current_closing_ends_the_open_stretch(
    data: tuple[list[dict[str, Any]], datetime],
) -> None:
    raws, at = data
    windows = parse_windows(raws)
    opened = next_opening(windows, at)
    closing = current_closing(windows, opened)
    if closing is None:
        # Only when the windows leave no gap in the weeks that were searched.
        probes = [opened + timedelta(minutes=7 * i) for i in range(0, 24 * 60 // 7 * 14)]
        assert all(is_open(windows, p) for p in probes)
        return
    assert closing > opened
    assert not is_open(windows, closing)
    assert not brute_is_open(raws, closing)
    gap = closing - opened
    probes = [opened + gap * (i / 200) for i in range(200)]
    probes += [opened + timedelta(minutes=m) for m in range(1, 361)]
    for probe in probes:
        if probe < closing:
            assert is_open(windows, probe), probe
    assert is_open(windows, closing - timedelta(microseconds=1))


@settings(max_examples=50, deadline=None, database=None)
@given(st.lists(st.sampled_from(ZONES).flatmap(raw_window)))
def test_to_dict_round_trip_property(raws: list[dict[str, Any]]) -> None:
    windows = parse_windows(raws)
    assert parse_windows([w.to_dict() for w in windows]) == windows
