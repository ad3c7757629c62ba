"""Durations as the config and the API write them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hipq.durations import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", 0.5),
        ("1s", 1.0),
        ("5m", 300.0),
        ("24h", 86400.0),
        ("7d", 604800.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        (" 2 m ", 120.0),
        ("90", 90.0),
        ("0", 0.0),
        (12, 12.0),
        (0.25, 0.25),
        ("1d2h3m4s5ms", 93784.005),
    ],
)
def test_parse_duration(text: object, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "  ",
        "abc",
        "5x",
        "1h-5m",
        "m5",
        "1m30",
        "-5",
        "-5s",
        "nan",
        "inf",
        True,
        None,
        [1],
        float("nan"),
        float("inf"),
        -1,
    ],
)
def test_parse_duration_refuses(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_parse_duration_message_names_the_units() -> None:
    with pytest.raises(ValueError, match=r"ms, s, m, h, d"):
        parse_duration("10 minutes")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (86400, "1d"),
        (172800, "2d"),
        (3600, "1h"),
        (5400, "90m"),
        (90, "90s"),
        (1, "1s"),
        (0.25, "250ms"),
        (1.5, "1.5s"),
        (1234.567, "1234.567s"),
        (1000001, "1000001s"),
        (1e-7, "0.0000001s"),
    ],
)
def test_format_duration(value: float, text: str) -> None:
    assert format_duration(value) == text
    assert parse_duration(text) == pytest.approx(value)


@given(st.integers(min_value=0, max_value=10**12))
def test_format_duration_round_trips_milliseconds(ms: int) -> None:
    value = ms / 1000
    assert parse_duration(format_duration(value)) == pytest.approx(value, rel=1e-12)


@given(st.floats(min_value=0, max_value=1e15, allow_nan=False))
def test_format_duration_is_always_parseable(value: float) -> None:
    assert parse_duration(format_duration(value)) == pytest.approx(value, rel=1e-9, abs=1e-9)
