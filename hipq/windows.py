"""Time-of-day windows a job may start in.

A window, as the API and the database store it::

    {"start": "05:00", "end": "07:00", "tz": "Europe/Berlin", "days": "mon-fri"}

Rules:

- ``start`` and ``end`` are wall-clock times ("HH:MM" or "HH:MM:SS") in ``tz`` (an IANA
  zone, default "UTC"). The window is half-open: open at ``start``, closed at ``end``.
- ``end`` earlier than ``start`` wraps midnight: 22:00-02:00 is open from 22:00 to 02:00
  the next day. ``start == end`` is refused (ambiguous: empty or the whole day).
- ``days`` (default: every day) names the day the window *opens* on: "mon-fri",
  "sat,sun", "mon,wed-fri", a wrapping range such as "fri-mon", or a list of those
  parts. A "fri" 22:00-02:00 window covers Friday 22:00 to Saturday 02:00.
- An instant is inside a window when its local wall-clock date and time, read in the
  window's zone, satisfy the rules above. Everything about DST follows from that:

  * Spring forward (skipped hour): a window starting in the gap opens at the first
    instant after it (02:30 Europe/Berlin on the last Sunday of March opens at 03:00
    local); a window ending in the gap closes at the gap's end; a window lying wholly
    in the gap does not open that day.
  * Fall back (repeated hour): both occurrences of a repeated wall time count as
    inside. A window 02:00-02:30 opens at the first 02:00, closes at the first 02:30,
    and is open again from the second 02:00 to the second 02:30.

- No windows means always open.

All instants given to and returned by this module are timezone-aware; results are UTC.
Nothing here reads the clock: the time is always a parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "ALL_DAYS",
    "Window",
    "WindowError",
    "current_closing",
    "is_open",
    "next_opening",
    "parse_windows",
]

DAY_NAMES: tuple[str, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
ALL_DAYS: frozenset[int] = frozenset(range(7))

_FIELDS = ("start", "end", "tz", "days")
_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?", re.ASCII)  # ASCII digits only

# A valid window opens on at least one weekday, so it opens within a week unless that
# day's window lies wholly in a DST gap, and then the week after. Three chunks of eight
# days cover that with a margin while keeping the common case to one chunk.
_CHUNK = timedelta(days=8)
_CHUNKS = 3


class WindowError(ValueError):
    """A window definition is invalid; the message names the field, e.g. ``windows[1].tz``."""


@dataclass(frozen=True)
class Window:
    """One time-of-day window; ``days`` holds weekday numbers (0 = Monday)."""

    start: time
    end: time
    tz: str = "UTC"
    days: frozenset[int] = ALL_DAYS
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.start == self.end:
            raise WindowError("start and end must differ")
        # Callers may pass any set; a frozenset keeps the window hashable (cache keys).
        object.__setattr__(self, "days", frozenset(self.days))
        if not self.days or not self.days <= ALL_DAYS:
            raise WindowError("days must be a non-empty set of weekday numbers 0-6")
        # Resolved once: zone lookups on every instant check would be wasted work.
        object.__setattr__(self, "zone", _zone(self.tz))

    @property
    def wraps(self) -> bool:
        """True when the window runs past midnight into the next day."""
        return self.end < self.start

    def contains(self, at: datetime) -> bool:
        """Whether the wall-clock time of ``at`` in this window's zone is inside it."""
        local = _aware(at).astimezone(self.zone)
        wall = local.time()  # fold is ignored by comparisons: a repeated hour counts twice
        weekday = local.weekday()
        if not self.wraps:
            return weekday in self.days and self.start <= wall < self.end
        if wall >= self.start:
            return weekday in self.days
        return wall < self.end and (weekday - 1) % 7 in self.days

    def to_dict(self) -> dict[str, str]:
        """The JSON form; ``parse_windows([w.to_dict()])`` gives back an equal window."""
        out = {"start": _format_time(self.start), "end": _format_time(self.end), "tz": self.tz}
        if self.days != ALL_DAYS:
            out["days"] = _format_days(self.days)
        return out

    def __str__(self) -> str:
        days = "" if self.days == ALL_DAYS else f" {_format_days(self.days)}"
        return f"{_format_time(self.start)}-{_format_time(self.end)} {self.tz}{days}"


# --- parsing -----------------------------------------------------------------------------


def parse_windows(raw: Sequence[Mapping[str, Any]] | None) -> tuple[Window, ...]:
    """Validate the ``windows`` field of a job; ``None`` or ``[]`` means no restriction."""
    if raw is None:
        return ()
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
        raise WindowError("windows: expected a list of windows")
    return tuple(_parse_window(item, f"windows[{i}]") for i, item in enumerate(raw))


def _parse_window(item: object, where: str) -> Window:
    if not isinstance(item, Mapping):
        raise WindowError(f"{where}: expected an object with start, end, tz, days")
    for key in item:
        if key not in _FIELDS:
            raise WindowError(
                f"{where}.{key}: unknown field (expected one of start, end, tz, days)"
            )
    start = _parse_time(item.get("start"), f"{where}.start")
    end = _parse_time(item.get("end"), f"{where}.end")
    if start == end:
        raise WindowError(f"{where}.end: must differ from start ({_format_time(start)})")
    tz = item.get("tz")
    tz = "UTC" if tz is None else tz
    try:
        _zone(tz)
    except WindowError as exc:
        raise WindowError(f"{where}.tz: {exc}") from None
    days = _parse_days(item.get("days"), f"{where}.days")
    return Window(start=start, end=end, tz=tz, days=days)


def _parse_time(value: object, where: str) -> time:
    if value is None:
        raise WindowError(f"{where}: required")
    match = _TIME.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise WindowError(f"{where}: expected 'HH:MM' or 'HH:MM:SS', got {value!r}")
    hour, minute, second = (int(part or 0) for part in match.groups())
    if hour > 23 or minute > 59 or second > 59:
        raise WindowError(f"{where}: not a time of day: {value!r}")
    return time(hour, minute, second)


def _zone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise WindowError(f"expected a time zone name such as 'Europe/Berlin', got {name!r}")
    return _load_zone(name)


@lru_cache(maxsize=512)
def _load_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    # ValueError/OSError: malformed keys (absolute or relative paths) and unreadable files.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise WindowError(f"unknown time zone {name!r}") from None


def _parse_days(value: object, where: str) -> frozenset[int]:
    if value is None:
        return ALL_DAYS
    if isinstance(value, str):
        parts: list[object] = list(value.split(","))
    elif isinstance(value, list | tuple):
        parts = list(value)
    else:
        raise WindowError(f"{where}: expected e.g. 'mon-fri' or ['sat', 'sun'], got {value!r}")
    if not parts:
        raise WindowError(f"{where}: must name at least one day")
    days: set[int] = set()
    for part in parts:
        days.update(_parse_day_part(part, where))
    return frozenset(days)


def _parse_day_part(part: object, where: str) -> Iterable[int]:
    if not isinstance(part, str):
        raise WindowError(f"{where}: expected day names, got {part!r}")
    first, sep, last = part.strip().lower().partition("-")
    a = _day_number(first.strip(), where)
    if not sep:
        return (a,)
    b = _day_number(last.strip(), where)
    # A range such as "fri-mon" wraps over the weekend, as a reader of it would expect.
    return ((a + i) % 7 for i in range((b - a) % 7 + 1))


def _day_number(name: str, where: str) -> int:
    try:
        return DAY_NAMES.index(name)
    except ValueError:
        raise WindowError(
            f"{where}: unknown day {name!r} (use mon, tue, wed, thu, fri, sat, sun)"
        ) from None


def _format_time(value: time) -> str:
    return value.strftime("%H:%M:%S" if value.second else "%H:%M")


def _format_days(days: frozenset[int]) -> str:
    parts: list[str] = []
    ordered = sorted(days)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{DAY_NAMES[ordered[i]]}-{DAY_NAMES[ordered[j]]}")
        else:
            parts.extend(DAY_NAMES[d] for d in ordered[i : j + 1])
        i = j + 1
    return ",".join(parts)


# --- queries -----------------------------------------------------------------------------


def is_open(windows: Sequence[Window], at: datetime) -> bool:
    """Whether a job may start at ``at``: inside any window, or there are no windows."""
    _aware(at)
    return not windows or any(w.contains(at) for w in windows)


def next_opening(windows: Sequence[Window], at: datetime) -> datetime:
    """``at`` (in UTC) if open, else the earliest instant after ``at`` when a window opens."""
    at = _aware(at).astimezone(UTC)
    if is_open(windows, at):
        return at
    found = _first_change(windows, at, to_open=True)
    if found is None:
        # Unreachable for windows that passed validation; refuse rather than loop forever.
        raise WindowError(f"windows do not open within {_CHUNKS * _CHUNK.days} days of {at}")
    return found


def current_closing(windows: Sequence[Window], at: datetime) -> datetime | None:
    """When the open stretch containing ``at`` ends (the first closed instant after it).

    ``None`` when ``at`` is not open, when there are no windows, or when the windows
    together never close (e.g. 00:00-12:00 plus 12:00-00:00 every day).
    """
    at = _aware(at).astimezone(UTC)
    if not windows or not is_open(windows, at):
        return None
    return _first_change(windows, at, to_open=False)


def _first_change(windows: Sequence[Window], at: datetime, *, to_open: bool) -> datetime | None:
    # is_open is constant between consecutive change points (and takes the new value at
    # a change point), so the first change point with the wanted value is the answer.
    lo = at
    for _ in range(_CHUNKS):
        hi = lo + _CHUNK
        for instant in _change_points(windows, lo, hi):
            if is_open(windows, instant) == to_open:
                return instant
        lo = hi
    return None


def _change_points(windows: Sequence[Window], lo: datetime, hi: datetime) -> list[datetime]:
    """Sorted UTC instants in ``(lo, hi]`` at which ``is_open`` may change value.

    The wall clock crosses a window's start or end (once, or twice in a repeated hour),
    or jumps at a UTC offset change (which covers starts and ends inside a gap).
    """
    points: set[datetime] = set()
    for window in windows:
        day = lo.astimezone(window.zone).date() - timedelta(days=1)
        last = hi.astimezone(window.zone).date() + timedelta(days=1)
        while day <= last:
            # Only a listed day's start, and the end of a window opened on a listed day,
            # can change anything; other crossings are skipped as wasted work.
            if day.weekday() in window.days:
                points.update(_instants_of(day, window.start, window.zone))
            if (day.weekday() - window.wraps) % 7 in window.days:
                points.update(_instants_of(day, window.end, window.zone))
            day += timedelta(days=1)
        points.update(_offset_changes(window.zone, lo, hi))
    return sorted(p for p in points if lo < p <= hi)


@lru_cache(maxsize=16384)
def _instants_of(day: date, wall: time, zone: ZoneInfo) -> frozenset[datetime]:
    """The UTC instants whose wall clock in ``zone`` reads ``day`` ``wall``: 0, 1 or 2.

    Cached because a queue asks about the same few windows for many jobs every tick.
    """
    naive = datetime.combine(day, wall)
    found: set[datetime] = set()
    for fold in (0, 1):
        instant = naive.replace(tzinfo=zone, fold=fold).astimezone(UTC)
        # A wall time in a gap does not survive the round trip; the gap's end is an
        # offset change and is found there instead.
        if instant.astimezone(zone).replace(tzinfo=None) == naive:
            found.add(instant)
    return frozenset(found)


def _offset_changes(zone: ZoneInfo, lo: datetime, hi: datetime) -> list[datetime]:
    day, out = lo.date(), list[datetime]()
    while day <= hi.date():
        out.extend(_offset_changes_on(zone, day))
        day += timedelta(days=1)
    return out


@lru_cache(maxsize=4096)
def _offset_changes_on(zone: ZoneInfo, day: date) -> tuple[datetime, ...]:
    """UTC instants on the UTC date ``day`` at which ``zone`` changes its UTC offset.

    zoneinfo does not expose its transition table, so the day is sampled hourly and each
    change narrowed to the second (tz transitions fall on whole seconds).
    """
    start = datetime.combine(day, time(), tzinfo=UTC)
    out: list[datetime] = []
    before = _offset(zone, start)
    for hour in range(1, 25):
        after = _offset(zone, start + timedelta(hours=hour))
        if after != before:
            out.append(_narrow(zone, start + timedelta(hours=hour - 1), before))
        before = after
    return tuple(out)


def _narrow(zone: ZoneInfo, lo: datetime, old: timedelta) -> datetime:
    """The first whole second within the hour after ``lo`` whose offset is not ``old``."""
    low, high = 0, 3600
    while high - low > 1:
        mid = (low + high) // 2
        if _offset(zone, lo + timedelta(seconds=mid)) == old:
            low = mid
        else:
            high = mid
    return lo + timedelta(seconds=high)


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    # An aware datetime converted to a ZoneInfo always has an offset.
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _aware(at: datetime) -> datetime:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"expected a timezone-aware datetime, got {at!r}")
    return at
