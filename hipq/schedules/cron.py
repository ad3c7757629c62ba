"""Fire times of a cron expression in a time zone, computed by APScheduler's ``CronTrigger``.

Daylight saving time, decided once here and documented in docs/schedules.md:

- spring forward: a wall time that does not exist that day (02:30 in Europe/Berlin
  on the last Sunday of March) fires once, at the instant the clock jumps to
  (``CronTrigger`` gives 02:30+01:00, which is 03:30 CEST);
- fall back: a wall time that occurs twice (02:30 on the last Sunday of October)
  fires once, at its first occurrence. ``CronTrigger`` gives both; the second
  (``fold=1``) is dropped here.

So ``0 2 * * *`` fires exactly once on every day of the year.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger  # type: ignore[import-untyped]


class ScheduleError(ValueError):
    """A schedule hipq refuses; ``field`` names the part at fault (as the API reports it)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ScheduleError("timezone", f"unknown IANA time zone {name!r}") from None


@dataclass(frozen=True)
class Cron:
    """A checked cron expression (five fields) in an IANA time zone."""

    expression: str
    timezone: str
    trigger: CronTrigger = field(compare=False, repr=False)

    @classmethod
    def parse(cls, expression: str, timezone: str, now: datetime) -> Cron:
        """Refuse a bad field, an unknown zone, and an expression that never fires."""
        tz = zone(timezone)
        if len(expression.split()) != 5:
            raise ScheduleError(
                "cron", f"{expression!r}: need five fields (minute hour day month weekday)"
            )
        try:
            trigger = CronTrigger.from_crontab(expression, timezone=tz)
        except ValueError as exc:
            raise ScheduleError("cron", f"{expression!r}: {exc}") from None
        cron = cls(expression, timezone, trigger)
        if cron.next_after(now) is None:
            raise ScheduleError("cron", f"{expression!r} never fires")
        return cron

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after`` (UTC), or None if there is none."""
        return next(self.fire_times(after), None)

    def fire_times(self, after: datetime) -> Iterator[datetime]:
        """Fire times strictly after ``after``, in order, as UTC instants."""
        tz = self.trigger.timezone
        # CronTrigger's "now" is inclusive: start one microsecond later. The step is
        # taken in UTC: aware arithmetic in a zone is wall-clock arithmetic, which
        # loses the fold and would return the repeated hour's second 02:30 for ever.
        start = after.astimezone(UTC)
        while True:
            fire = self.trigger.get_next_fire_time(None, (start + _TICK).astimezone(tz))
            if fire is None:
                return
            start = fire.astimezone(UTC)
            local = fire.astimezone(tz)
            if _second_occurrence(local):
                continue  # the repeated hour of a fall-back night fires once, the first time
            yield local.astimezone(UTC)


def _second_occurrence(local: datetime) -> bool:
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


_TICK = timedelta(microseconds=1)
