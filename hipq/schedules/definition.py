"""A schedule as the core sees it, checked once, and what it decides at each tick.

``plan`` is pure: given the schedule, how far its fire times were decided and
``now``, it returns the fire times to turn into jobs and how far that decides.
``job_fields`` renders the job template for one fire time.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

from hipq.durations import parse_duration
from hipq.schedules.cron import Cron, ScheduleError
from hipq.templates import TemplateError, compile_template

CatchUp = Literal["none", "latest", "all"]
Overlap = Literal["allow", "skip", "buffer_one", "cancel_other"]
CATCH_UPS: tuple[str, ...] = ("none", "latest", "all")
# What a fire time does while the schedule's previous job is open (scheduled, running
# or awaiting): make its job anyway, make none, hold one job back until the previous
# one ends, or cancel the previous one and run this one once it has ended.
OVERLAPS: tuple[str, ...] = ("allow", "skip", "buffer_one", "cancel_other")
# The job template's fields: those of POST /v1/jobs except run_at (the fire time).
TEMPLATE_FIELDS = frozenset(
    "type payload queue priority weight labels windows timeout retry critical "
    "correlation_key job_key job_key_mode unique_for".split()
)
# Labels hipq sets on every job a schedule makes (a template cannot set them).
SCHEDULE_LABEL, FIRE_TIME_LABEL, BACKFILLED_LABEL = "schedule", "fire_time", "backfilled"
# Placeholders a template's strings may use: {fire.time}, {fire.local}, {fire.date}, ...
TEMPLATE_ROOTS = frozenset({"fire", "schedule"})
# A schedule never looks further back than this (a year and a day).
MAX_BACKFILL_SECONDS = 367 * 86400.0
# Fire times one tick decides per schedule at most; the rest the next tick.
MAX_FIRES_PER_TICK = 1000


@dataclass(frozen=True)
class Schedule:
    name: str
    cron: Cron
    job: dict[str, Any]  # the template, API field names, strings may hold placeholders
    catch_up: CatchUp = "none"
    backfill_seconds: float = 86400.0
    overlap: Overlap = "allow"
    paused: bool = False
    pause_on_failure: bool = False
    source: Literal["config", "api"] = "api"
    checked_until: datetime | None = None

    @property
    def timezone(self) -> str:
        return self.cron.timezone


def check_name(name: str) -> None:
    """A name the routes can carry as one path segment (``/v1/schedules/{name}``): no
    ``/`` or ``\\``, not ``.`` or ``..`` (which a browser or a proxy resolves into
    another route: a dashboard button would act on that), no control characters, and
    no direction marks or other invisible format characters (Unicode Cf: a name shown
    with U+202E reads backwards, and two names that look alike would differ)."""
    if not name or len(name) > 200:
        raise ScheduleError("name", "must be 1 to 200 characters")
    if name in (".", "..") or any(c in "/\\" or _invisible(c) for c in name):
        raise ScheduleError(
            "name",
            "must not be '.' or '..' nor hold '/', '\\', control characters or direction marks",
        )


def _invisible(c: str) -> bool:
    return unicodedata.category(c) in ("Cc", "Cf")


def build_schedule(
    name: str, fields: dict[str, Any], now: datetime, source: Literal["config", "api"] = "api"
) -> Schedule:
    """A schedule from its API (or config) fields; ``ScheduleError`` names the field at fault."""
    if not name or len(name) > 200:
        raise ScheduleError("name", "must be 1 to 200 characters")
    cron = Cron.parse(str(fields.get("cron", "")), str(fields.get("timezone", "UTC")), now)
    catch_up = fields.get("catch_up") or "none"
    if catch_up not in CATCH_UPS:
        raise ScheduleError("catch_up", f"must be one of {', '.join(CATCH_UPS)}")
    overlap = fields.get("overlap") or "allow"
    if overlap not in OVERLAPS:
        raise ScheduleError("overlap", f"must be one of {', '.join(OVERLAPS)}")
    try:
        backfill = parse_duration(fields.get("backfill", "1d"))
    except ValueError as exc:
        raise ScheduleError("backfill", str(exc)) from None
    if not 0 <= backfill <= MAX_BACKFILL_SECONDS:
        raise ScheduleError("backfill", "must be between 0s and 367d")
    job = fields.get("job")
    if not isinstance(job, dict) or "type" not in job:
        raise ScheduleError("job", "must be a job template with at least a type")
    unknown = sorted(set(job) - TEMPLATE_FIELDS)
    if unknown:
        raise ScheduleError(f"job.{unknown[0]}", "unknown field of a job template")
    labels = job.get("labels") or {}
    for taken in (SCHEDULE_LABEL, FIRE_TIME_LABEL, BACKFILLED_LABEL):
        if taken in labels:
            raise ScheduleError(f"job.labels.{taken}", "is set by hipq on a schedule's jobs")
    _check_placeholders(job)
    return Schedule(
        name=name,
        cron=cron,
        job=dict(job),
        catch_up=cast(CatchUp, catch_up),
        backfill_seconds=backfill,
        overlap=cast(Overlap, overlap),
        paused=bool(fields.get("paused", False)),
        pause_on_failure=bool(fields.get("pause_on_failure", False)),
        source=source,
    )


def fire_context(name: str, fire: datetime, timezone: str) -> dict[str, Any]:
    from zoneinfo import ZoneInfo

    local = fire.astimezone(ZoneInfo(timezone))
    return {
        "schedule": name,
        "fire": {
            "time": fire.astimezone(UTC).isoformat(),
            "local": local.isoformat(),
            "date": local.date().isoformat(),
            "timestamp": int(fire.timestamp()),
        },
    }


def job_fields(schedule: Schedule, fire: datetime, backfilled: bool = False) -> dict[str, Any]:
    """The job for ``fire`` as API fields: placeholders rendered, ``run_at`` the fire
    time, and the labels ``schedule`` and ``fire_time`` that record where it came from
    (and ``backfilled: "true"`` on a job that catch-up made for a missed fire time)."""
    context = fire_context(schedule.name, fire, schedule.timezone)
    fields = _render(schedule.job, context, "job")
    fields["labels"] = {
        **(fields.get("labels") or {}),
        SCHEDULE_LABEL: schedule.name,
        FIRE_TIME_LABEL: context["fire"]["time"],
        **({BACKFILLED_LABEL: "true"} if backfilled else {}),
    }
    fields["run_at"] = fire
    return fields


@dataclass(frozen=True)
class Plan:
    fires: list[datetime]  # to become jobs, oldest first
    missed: bool  # some due fire times were dropped (catch_up, or older than backfill)
    checked_until: datetime  # everything up to here is decided

    @property
    def changes(self) -> bool:
        """Whether there is anything to store (an idle tick writes nothing)."""
        return bool(self.fires) or self.missed


# ``latest`` looks for the newest due fire time in these spans back from now, shortest
# first, so that ``* * * * *`` with a year of backfill costs one hour of fire times.
_LATEST_SPANS = (timedelta(hours=1), timedelta(days=1), timedelta(days=31), None)


def plan(schedule: Schedule, checked_until: datetime, now: datetime, on_time: float) -> Plan:
    """Which fire times in (checked_until, now] become jobs.

    A fire time at most ``on_time`` seconds old is on time and always becomes a job.
    Older ones were missed (hipq was down): ``none`` drops them, ``all`` makes a job
    of each within ``backfill``, ``latest`` only of the newest due fire time (on time
    or within ``backfill``).
    """
    first = schedule.cron.next_after(checked_until)
    if first is None or first > now:
        return Plan([], False, checked_until)
    window = timedelta(seconds=max(schedule.backfill_seconds, on_time))
    if schedule.catch_up == "none":
        window = timedelta(seconds=on_time)
    start = max(checked_until, now - window - _TICK)
    missed = first <= start  # due fire times before the window: dropped
    if schedule.catch_up == "latest":
        newest = _newest(schedule.cron, start, now)
        fires = [] if newest is None else [newest]
        return Plan(fires, missed or newest != first, now)
    fires, until = [], now
    for fire in schedule.cron.fire_times(start):
        if fire > now:
            break
        fires.append(fire)
        if len(fires) >= MAX_FIRES_PER_TICK:
            until = fire  # decided up to here; the rest next tick
            break
    return Plan(fires, missed, until)


def _newest(cron: Cron, start: datetime, now: datetime) -> datetime | None:
    for span in _LATEST_SPANS:
        since = start if span is None else max(start, now - span)
        newest = None
        for fire in cron.fire_times(since):
            if fire > now:
                break
            newest = fire
        if newest is not None or since == start:
            return newest
    return None


_TICK = timedelta(microseconds=1)


def _check_placeholders(value: Any, where: str = "job") -> None:
    if isinstance(value, str) and "{" in value:
        try:
            compile_template(value, TEMPLATE_ROOTS)
        except TemplateError as exc:
            raise ScheduleError(where, str(exc)) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_placeholders(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_placeholders(item, f"{where}[{i}]")


def _render(value: Any, context: dict[str, Any], where: str) -> Any:
    if isinstance(value, str) and "{" in value:
        try:
            return compile_template(value, TEMPLATE_ROOTS).render(context)
        except TemplateError as exc:
            raise ScheduleError(where, str(exc)) from None
    if isinstance(value, dict):
        return {k: _render(v, context, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_render(v, context, f"{where}[{i}]") for i, v in enumerate(value)]
    return value
