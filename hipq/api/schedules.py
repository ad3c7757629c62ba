"""/v1/schedules: recurring jobs. Create, list, read, change, delete, pause, resume,
run now, and the next fire times.

Schedules from the config are stored at start and are read-only here except for
pause, resume and run now (their definition belongs to the config file).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from hipq.api.auth import require
from hipq.api.errors import InvalidParameter
from hipq.api.json_body import JSONBodyRoute
from hipq.api.models import ErrorOut, JobOut
from hipq.process.scheduler import Scheduler, schedule_fields, to_row
from hipq.schedules import ScheduleError, build_schedule
from hipq.schedules.definition import Overlap
from hipq.service import Service
from hipq.storable_text import storable
from hipq.store import Conflict
from hipq.store.schedules import ScheduleRow

router = APIRouter(prefix="/v1/schedules", tags=["schedules"], route_class=JSONBodyRoute)

_Responses = dict[int | str, dict[str, Any]]
_404: _Responses = {404: {"model": ErrorOut, "description": "no schedule of that name"}}
_409: _Responses = {
    409: {"model": ErrorOut, "description": "defined in the config, or the name is taken"}
}
_422: _Responses = {422: {"model": ErrorOut, "description": "a field refused; `field` names it"}}


StorableText = Annotated[str, AfterValidator(storable)]
Name = Annotated[
    StorableText, Path(min_length=1, max_length=200, description="the schedule's name")
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScheduleIn(_In):
    name: StorableText = Field(min_length=1, max_length=200, description="unique among schedules")
    cron: str = Field(
        max_length=200,
        description="five fields: minute hour day-of-month month day-of-week, read as crontab "
        "reads them (Sunday is 0 or 7; both day fields restricted: either matches); refused "
        "if it has no fire time within 10 years",
    )
    timezone: str = Field("UTC", max_length=100, description="IANA zone, e.g. Europe/Berlin")
    job: dict[str, Any] = Field(
        description="the job made at each fire time: the fields of POST /v1/jobs except "
        "run_at; strings may use {fire.time}, {fire.local}, {fire.date}, {fire.timestamp}, "
        "{schedule}"
    )
    catch_up: Literal["none", "latest", "all"] = Field(
        "none", description="what becomes of fire times missed while no hipq ran"
    )
    backfill: float | str = Field("1d", description="how far back missed fire times count")
    overlap: Overlap = Field(
        "allow",
        description="while the schedule's previous job is open (scheduled, running or "
        "awaiting): allow makes the job anyway, skip makes none, buffer_one holds one "
        "job back until the previous ends (later fire times skipped), cancel_other "
        "cancels the previous job and makes this one once it has ended",
    )
    paused: bool = Field(False, description="makes no job while paused")
    pause_on_failure: bool = Field(
        False,
        description="pause the schedule when the job of its latest fire time fails for "
        "good (retries spent); paused_reason says which job, resuming clears it",
    )


class SchedulePatch(_In):
    cron: str | None = Field(None, max_length=200, description="replaces the cron expression")
    timezone: str | None = Field(None, max_length=100, description="replaces the IANA zone")
    job: dict[str, Any] | None = Field(None, description="replaces the job made")
    catch_up: Literal["none", "latest", "all"] | None = Field(
        None, description="replaces what becomes of missed fire times"
    )
    backfill: float | str | None = Field(
        None, description="replaces how far back missed fire times count"
    )
    overlap: Overlap | None = Field(
        None, description="replaces what a fire time does while the previous job is open"
    )
    pause_on_failure: bool | None = Field(
        None, description="replaces whether a job failed for good pauses the schedule"
    )


class ScheduleOut(BaseModel):
    name: str = Field(description="the schedule's name")
    source: Literal["config", "api"] = Field(description="config: read-only here")
    cron: str = Field(description="five fields: minute hour day-of-month month day-of-week")
    timezone: str = Field(description="the IANA zone its cron is read in")
    job: dict[str, Any] = Field(description="the job made at each fire time")
    catch_up: str = Field(description="none, latest or all: missed fire times")
    backfill_seconds: float = Field(description="how far back missed fire times count")
    overlap: str = Field(description="allow, skip, buffer_one or cancel_other")
    paused: bool = Field(description="makes no job while paused")
    pause_on_failure: bool = Field(description="a job failed for good pauses the schedule")
    paused_reason: str | None = Field(
        description="why the scheduler paused it (pause_on_failure): the failed job and "
        "its error; null when an operator paused it or it is not paused"
    )
    next_fire_time: datetime | None = Field(description="null while paused")
    checked_until: datetime = Field(description="fire times up to here are decided")
    created_at: datetime = Field(description="when it was created")
    updated_at: datetime = Field(description="when it last changed")


class ScheduleListOut(BaseModel):
    schedules: list[ScheduleOut] = Field(description="every schedule, by name")


class FireTimesOut(BaseModel):
    name: str = Field(description="the schedule's name")
    fire_times: list[datetime] = Field(description="its next fire times, soonest first")


class FireOut(BaseModel):
    fire_time: datetime = Field(description="the fire time decided")
    outcome: str = Field(
        description="created, run_now, skipped or buffered (overlap; buffered: waits "
        "for the previous job to end), invalid, conflict"
    )
    job_id: int | None = Field(description="the job it made, if any")


class FiresOut(BaseModel):
    name: str = Field(description="the schedule's name")
    fires: list[FireOut] = Field(description="its latest fire times, newest first")


class RunOut(BaseModel):
    fire_time: datetime = Field(description="the fire time recorded for this run")
    job: JobOut = Field(description="the job it made")


def _service(request: Request) -> Service:
    return request.app.state.service


def _scheduler(request: Request) -> Scheduler:
    scheduler = _service(request).scheduler
    assert scheduler is not None
    return scheduler


def _checked(scheduler: Scheduler, name: str, fields: dict[str, Any]) -> Any:
    try:
        return scheduler.check(name, fields)
    except ScheduleError as exc:
        raise InvalidParameter(exc.field, exc.message) from None


def _out(scheduler: Scheduler, row: ScheduleRow) -> ScheduleOut:
    now = scheduler.clock()
    # The stored cron and zone were checked when stored; the job template is not
    # checked here, so a schedule whose type left the config is still shown.
    schedule = build_schedule(row.name, schedule_fields(row), now)
    after = max(row.checked_until, now)
    return ScheduleOut(
        name=row.name,
        source=row.source,  # type: ignore[arg-type]
        cron=row.cron,
        timezone=row.timezone,
        job=row.job,
        catch_up=row.catch_up,
        backfill_seconds=row.backfill_seconds,
        overlap=row.overlap,
        paused=row.paused,
        pause_on_failure=row.pause_on_failure,
        paused_reason=row.paused_reason,
        next_fire_time=None if row.paused else schedule.cron.next_after(after),
        checked_until=row.checked_until,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


@router.get(
    "",
    dependencies=[Depends(require("read"))],
    response_model=ScheduleListOut,
    summary="All schedules",
)
async def list_schedules(request: Request) -> ScheduleListOut:
    scheduler = _scheduler(request)
    rows = await scheduler.store.schedule_list()
    # Each row's next fire time is a search (under a millisecond): many rows, a thread.
    shown = await asyncio.to_thread(lambda: [_out(scheduler, r) for r in rows])
    return ScheduleListOut(schedules=shown)


@router.post(
    "",
    # A schedule makes jobs: defining one needs what submitting a job does.
    dependencies=[Depends(require("operate", "submit"))],
    status_code=201,
    response_model=ScheduleOut,
    responses={**_409, **_422},
    summary="Create a schedule (fires from now on)",
)
async def create_schedule(body: ScheduleIn, request: Request) -> ScheduleOut:
    scheduler = _scheduler(request)
    fields = body.model_dump(exclude={"name"})
    schedule = _checked(scheduler, body.name, fields)
    now = scheduler.clock()
    row = await scheduler.store.schedule_create(to_row(schedule, now))
    return _out(scheduler, row)


@router.get(
    "/{name}",
    dependencies=[Depends(require("read"))],
    response_model=ScheduleOut,
    responses=_404,
    summary="One schedule",
)
async def get_schedule(name: Name, request: Request) -> ScheduleOut:
    scheduler = _scheduler(request)
    return _out(scheduler, await scheduler.store.schedule_get(name))


@router.patch(
    "/{name}",
    dependencies=[Depends(require("operate", "submit"))],
    response_model=ScheduleOut,
    responses={**_404, **_409, **_422},
    summary="Change a schedule made through the API (a new cron applies from now on)",
)
async def change_schedule(name: Name, body: SchedulePatch, request: Request) -> ScheduleOut:
    scheduler = _scheduler(request)
    old = await scheduler.store.schedule_get(name)
    changes = body.model_dump(exclude_unset=True)
    null = next((k for k, v in changes.items() if v is None), None)
    if null is not None:
        raise InvalidParameter(null, "cannot be null")
    schedule = _checked(scheduler, name, {**schedule_fields(old), **changes})
    now = scheduler.clock()
    row = await scheduler.store.schedule_change(name, to_row(schedule, now), now)
    return _out(scheduler, row)


@router.delete(
    "/{name}",
    dependencies=[Depends(require("operate"))],
    status_code=204,
    responses={**_404, **_409},
    summary="Delete a schedule made through the API (its jobs stay)",
)
async def delete_schedule(name: Name, request: Request) -> Response:
    await _scheduler(request).store.schedule_delete(name)
    return Response(status_code=204)


@router.post(
    "/{name}/pause",
    dependencies=[Depends(require("operate"))],
    response_model=ScheduleOut,
    responses=_404,
    summary="Make no jobs until resumed (kept across restarts)",
)
async def pause_schedule(name: Name, request: Request) -> ScheduleOut:
    scheduler = _scheduler(request)
    row = await scheduler.store.schedule_set_paused(name, True, scheduler.clock())
    return _out(scheduler, row)


@router.post(
    "/{name}/resume",
    dependencies=[Depends(require("operate"))],
    response_model=ScheduleOut,
    responses=_404,
    summary="Fire again from now on (what fell due while paused is not caught up)",
)
async def resume_schedule(name: Name, request: Request) -> ScheduleOut:
    scheduler = _scheduler(request)
    row = await scheduler.store.schedule_set_paused(name, False, scheduler.clock())
    return _out(scheduler, row)


@router.post(
    "/{name}/run",
    dependencies=[Depends(require("operate"))],
    status_code=201,
    response_model=RunOut,
    responses={**_404, **_409, **_422},
    summary="Make one job now (paused or not; overlap does not apply)",
)
async def run_schedule(name: Name, request: Request) -> RunOut:
    scheduler = _scheduler(request)
    try:
        result = await scheduler.run_now(name)
    except ScheduleError as exc:
        raise InvalidParameter(exc.field, exc.message) from None
    if result.job is None:
        raise Conflict(f"no job made: {result.outcome}", field="name")
    return RunOut(fire_time=result.at, job=JobOut.of(result.job))


@router.get(
    "/{name}/next",
    dependencies=[Depends(require("read"))],
    response_model=FireTimesOut,
    responses={**_404, **_422},
    summary="The next fire times (also of a paused schedule)",
)
async def next_fire_times(
    name: Name,
    request: Request,
    count: Annotated[int, Query(ge=1, le=1000, description="how many")] = 10,
) -> FireTimesOut:
    scheduler = _scheduler(request)
    row = await scheduler.store.schedule_get(name)
    schedule = build_schedule(name, schedule_fields(row), scheduler.clock())
    after = max(row.checked_until, scheduler.clock())
    # A thousand fire times are a tenth of a second of CPU: not on the event loop.
    times = await asyncio.to_thread(_first, schedule.cron.fire_times(after), count)
    return FireTimesOut(name=name, fire_times=times)


def _first(fires: Iterator[datetime], count: int) -> list[datetime]:
    return list(itertools.islice(fires, count))


@router.get(
    "/{name}/fires",
    dependencies=[Depends(require("read"))],
    response_model=FiresOut,
    responses=_404,
    summary="The latest decided fire times and their jobs, newest first",
)
async def schedule_fires(
    name: Name,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000, description="fire times at most")] = 50,
) -> FiresOut:
    scheduler = _scheduler(request)
    await scheduler.store.schedule_get(name)
    fires = await scheduler.store.schedule_fires(name, limit)
    return FiresOut(
        name=name,
        fires=[
            FireOut(fire_time=f["fire_time"], outcome=f["outcome"], job_id=f["job_id"])
            for f in fires
        ],
    )
