"""Fire times of a cron expression in a time zone, computed by APScheduler's ``CronTrigger``.

The expression is read as crontab reads it (Vixie cron, cronie, Debian):

- day of week: 0 or 7 is Sunday, 1 Monday, ... 6 Saturday; names ``sun`` to ``sat``.
  APScheduler 3 counts 0 as Monday, so the field is translated here into day names
  (``1-5`` becomes ``mon,tue,wed,thu,fri``) before ``CronTrigger`` sees it.
- day of month and day of week both restricted (neither starts with ``*``): a day
  matches if either field does (``0 0 1 * mon`` fires on the 1st and on every Monday).
  If either starts with ``*`` (``*/2`` too), both must match. ``CronTrigger`` always
  wants both, so the OR case is two triggers, the earlier fire time winning.

Daylight saving time, decided once here and documented in docs/schedules.md:

- spring forward: a wall time that does not exist that day (02:30 in Europe/Berlin
  on the last Sunday of March) fires once, at the instant the clock jumps to
  (``CronTrigger`` gives 02:30+01:00, which is 03:30 CEST);
- fall back: a wall time that occurs twice (02:30 on the last Sunday of October)
  fires once, at its first occurrence. ``CronTrigger`` gives both; the second
  (``fold=1``) is dropped here.

So ``0 2 * * *`` fires exactly once on every day of the year.

Each search for the next fire time looks at most ``MAX_GAP_YEARS`` ahead (an
expression that never fires would otherwise be searched up to the year 9999, a
second of CPU on the event loop), and an expression with no fire time that close is
refused.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]

# The longest wait between two fire times hipq accepts: 29 February waits up to 8
# years (2096 to 2104).
MAX_GAP_YEARS = 10
_MAX_GAP = timedelta(days=366 * MAX_GAP_YEARS)
# Crontab's day numbers: the index here; 7 is Sunday again.
_DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


class ScheduleError(ValueError):
    """A schedule hipq refuses; ``field`` names the part at fault (as the API reports it)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    # A folder of the tz database (``Europe``) is an OSError (IsADirectoryError).
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise ScheduleError("timezone", f"unknown IANA time zone {name!r}") from None


def weekdays(spec: str) -> set[int]:
    """The crontab days (0 Sunday ... 6 Saturday) a day-of-week field names.

    Lists, ranges (``1-5``, ``mon-fri``, ``5-7``), steps (``*/2`` is Sunday, Tuesday,
    Thursday, Saturday; ``1/2`` runs to 7) and names, case-insensitive; 7 is Sunday.
    """
    days: set[int] = set()
    for term in spec.lower().split(","):
        base, slash, step_text = term.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ValueError(f"day of week {term!r}: the step must be a positive number")
            step = int(step_text)
        if base == "*":
            low, high = 0, 7
        elif "-" in base:
            first, _, last = base.partition("-")
            low, high = _day(first), _day(last)
            if high < low:
                raise ValueError(
                    f"day of week {term!r}: a range runs from the earlier day to the later "
                    "(Sunday is 0 or 7: write 6-7 or sat,sun)"
                )
        else:
            low = _day(base)
            high = 7 if slash else low
        days.update(d % 7 for d in range(low, high + 1, step))
    return days


def _day(text: str) -> int:
    if text in _DAY_NAMES:
        return _DAY_NAMES.index(text)
    if text.isdigit() and int(text) <= 7:
        return int(text)
    raise ValueError(f"day of week {text!r}: a number from 0 to 7 (0 and 7 are Sunday) or sun-sat")


def _triggers(expression: str, tz: ZoneInfo) -> tuple[CronTrigger, ...]:
    minute, hour, day, month, dow = expression.split()
    days = weekdays(dow)
    # APScheduler's own names, which mean the same day in both numberings.
    names = "*" if len(days) == 7 else ",".join(_DAY_NAMES[d] for d in sorted(days))

    def trigger(day: str, day_of_week: str) -> CronTrigger:
        return CronTrigger(
            minute=minute, hour=hour, day=day, month=month, day_of_week=day_of_week, timezone=tz
        )

    if day.startswith("*") or dow.startswith("*"):
        return (trigger(day, names),)
    return (trigger(day, "*"), trigger("*", names))  # crontab's OR of the two day fields


@dataclass(frozen=True)
class Cron:
    """A checked cron expression (five fields) in an IANA time zone."""

    expression: str
    timezone: str
    triggers: tuple[CronTrigger, ...] = field(compare=False, repr=False)

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @classmethod
    def parse(cls, expression: str, timezone: str, now: datetime) -> Cron:
        """Refuse a bad field, an unknown zone, and an expression that never fires
        (or not within ``MAX_GAP_YEARS``)."""
        tz = zone(timezone)
        if len(expression.split()) != 5:
            raise ScheduleError(
                "cron", f"{expression!r}: need five fields (minute hour day month weekday)"
            )
        try:
            triggers = _triggers(expression, tz)
        except ValueError as exc:
            raise ScheduleError("cron", f"{expression!r}: {exc}") from None
        cron = cls(expression, timezone, triggers)
        if cron.next_after(now) is None:
            raise ScheduleError(
                "cron", f"{expression!r} never fires (none within {MAX_GAP_YEARS} years)"
            )
        return cron

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after`` (UTC), or None if there is none
        within ``MAX_GAP_YEARS``."""
        return next(self.fire_times(after), None)

    def fire_times(self, after: datetime) -> Iterator[datetime]:
        """Fire times strictly after ``after``, in order, as UTC instants; they end
        where the next one is more than ``MAX_GAP_YEARS`` away."""
        # Copies whose end_date bounds each search (the stored triggers stay as they
        # are, so that a Cron can be read from several threads).
        triggers = [copy.copy(t) for t in self.triggers]
        tz = triggers[0].timezone
        # CronTrigger's "now" is inclusive: start one microsecond later. The step is
        # taken in UTC: aware arithmetic in a zone is wall-clock arithmetic, which
        # loses the fold and would return the repeated hour's second 02:30 for ever.
        start = after.astimezone(UTC)
        # The next fire time of each trigger; only the one just used is searched again.
        nexts = [_search(t, start, tz) for t in triggers]
        while True:
            fire = min((f for f in nexts if f is not None), default=None)
            if fire is None:
                return
            start = fire.astimezone(UTC)
            nexts = [
                _search(t, start, tz) if f is not None and f <= fire else f
                for t, f in zip(triggers, nexts, strict=True)
            ]
            local = fire.astimezone(tz)
            if _second_occurrence(local):
                continue  # the repeated hour of a fall-back night fires once, the first time
            yield local.astimezone(UTC)


def _search(trigger: CronTrigger, start: datetime, tz: ZoneInfo) -> datetime | None:
    """``trigger``'s first fire time after ``start``, if within ``MAX_GAP_YEARS``."""
    trigger.end_date = (start + _MAX_GAP).astimezone(tz)
    fire: datetime | None = trigger.get_next_fire_time(None, (start + _TICK).astimezone(tz))
    return fire  # None: past end_date


def _second_occurrence(local: datetime) -> bool:
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


_TICK = timedelta(microseconds=1)
