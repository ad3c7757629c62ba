"""Pull workers: ``POST /v1/workers/fetch`` hands out claimed jobs with an attempt
token, and ``/v1/workers/jobs/{id}/...`` takes a worker's reports on them.

A report is checked against its token here (a stale one is a 409 and changes
nothing) and then stored as an external system's answer is: an outcome in the
inbox, a heartbeat or checkpoint as a heartbeat, under the job's per-attempt key.
The queue's owner settles it at its tick (``hipq.pull``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from hipq.api.auth import WorkerAccess, check_worker_types, principal_of
from hipq.api.callbacks import PROGRESS_MAX_BYTES
from hipq.api.errors import InvalidParameter
from hipq.api.models import ErrorOut, JobId
from hipq.ingest.response_intake import check_body
from hipq.jobs import Job
from hipq.pull import reports
from hipq.pull.waiters import MAX_WAIT_SECONDS
from hipq.service import Service
from hipq.transports.python import MAX_SNOOZE_SECONDS

router = APIRouter(prefix="/v1/workers", tags=["workers"])

# The most jobs one fetch takes.
MAX_FETCH = 1000
_ERRORS: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorOut},
    404: {"model": ErrorOut},
    409: {"model": ErrorOut},
    422: {"model": ErrorOut},
}


class _In(BaseModel):
    model_config = {"extra": "forbid"}


class FetchIn(_In):
    types: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        min_length=1, description="the pull job types this worker runs"
    )
    count: int = Field(1, ge=1, le=MAX_FETCH, description="at most this many jobs")
    wait: float = Field(
        0,
        ge=0,
        le=MAX_WAIT_SECONDS,
        description="seconds to wait for a job when none can be taken now (a long poll)",
    )
    worker: str | None = Field(
        None,
        max_length=200,
        description="a name for this worker, kept with each job it takes (default: the "
        "token's name)",
    )


class FetchedJob(BaseModel):
    id: int = Field(description="the job's id, which its reports name")
    type: str = Field(description="its job type")
    queue: str = Field(description="its queue")
    attempt: int = Field(description="the attempt this token is for")
    token: str = Field(description="the attempt token every report on this job carries")
    payload: dict[str, Any] = Field(description="the job's payload (its last checkpoint's)")
    labels: dict[str, str] = Field(description="the job's labels")
    priority: int = Field(description="its priority (lower ran first)")
    weight: int = Field(description="the capacity units it holds while it runs")
    critical: bool = Field(description="whether it passed throttlers that let critical jobs by")
    timeout: float = Field(description="the job's timeout in seconds")
    heartbeat_timeout: float | None = Field(
        description="the job type's heartbeat_timeout in seconds: heartbeat well within it"
    )
    deadline: datetime | None = Field(
        description="the attempt's deadline: report or heartbeat before it, or the attempt "
        "times out and is retried"
    )


class FetchOut(BaseModel):
    jobs: list[FetchedJob] = Field(description="the jobs taken (empty when none came in time)")


class _Report(_In):
    token: str = Field(min_length=1, max_length=200, description="the token of the fetch")


class CompleteIn(_Report):
    result: Any = Field(None, description="the job's result (JSON)")


class FailIn(_Report):
    error: str = Field(min_length=1, max_length=10_000, description="why the attempt failed")
    retryable: bool = Field(
        True, description="false: the job fails now, whatever its retry strategy says"
    )
    traceback: str | None = Field(
        None, max_length=65_536, description="where it failed, kept on the attempt"
    )


class SnoozeIn(_Report):
    seconds: float = Field(ge=0, le=MAX_SNOOZE_SECONDS, description="run again after this")
    reason: str | None = Field(None, max_length=1000, description="shown as the job's last error")


class HeartbeatIn(_Report):
    progress: Any = Field(None, description=f"shown on the job (at most {PROGRESS_MAX_BYTES} B)")
    extend_by: float | None = Field(
        None,
        gt=0,
        le=MAX_SNOOZE_SECONDS,
        description="the deadline becomes now plus this many seconds (default: the type's "
        "heartbeat_timeout, else the job's timeout)",
    )


class CheckpointIn(_Report):
    payload: dict[str, Any] = Field(description="the payload a retry of this job starts from")
    extend_by: float | None = Field(
        None, gt=0, le=MAX_SNOOZE_SECONDS, description="as for a heartbeat: the new deadline"
    )


class ReportAccepted(BaseModel):
    status: str = Field("accepted", description="accepted: stored, settled at the next tick")
    job_id: int = Field(description="the job reported on")
    attempt: int = Field(description="the attempt the report is for")


class BeatAccepted(ReportAccepted):
    deadline: datetime = Field(
        description="the attempt's deadline once the queue's loop takes it (within a few "
        "seconds): send the next heartbeat before it"
    )


def _out(service: Service, job: Job, token: str) -> FetchedJob:
    config = service.job_types[job.type].config
    return FetchedJob(
        id=job.id,
        type=job.type,
        queue=job.queue,
        attempt=job.attempt,
        token=token,
        payload=job.payload,
        labels=job.labels,
        priority=job.priority,
        weight=job.weight,
        critical=job.critical,
        timeout=job.timeout_seconds,
        heartbeat_timeout=config.heartbeat_timeout,
        deadline=job.deadline,
    )


@router.post(
    "/fetch",
    dependencies=[Depends(WorkerAccess())],
    response_model=FetchOut,
    responses=_ERRORS,
    summary="Take claimed jobs of pull types, each with its attempt token (a long poll)",
    description=(
        "Jobs of a job type with `transport: pull` are admitted by their queue's throttlers "
        "and claimed as any other; this hands such claimed jobs, not yet taken by a worker, "
        "to the caller: at most `count`, oldest claim first. With none to take it waits up "
        f"to `wait` seconds (at most {MAX_WAIT_SECONDS:g}) for one and answers as soon as "
        "one is claimed, else with an empty list. Each job carries a `token`: its reports "
        "(`/v1/workers/jobs/{id}/complete`, `fail`, `snooze`, `heartbeat`, `checkpoint`) "
        "carry it. A job not reported before its deadline times out and is retried as its "
        "retry strategy says (and may then be fetched again). A type that is not a pull "
        "type is a 422 naming `types`; one outside a token's `type=` restriction a 403."
    ),
)
async def fetch(body: FetchIn, request: Request) -> FetchOut:
    service: Service = request.app.state.service
    types = list(dict.fromkeys(body.types))
    for i, name in enumerate(types):
        info = service.job_types.lookup(name)
        if info is None or not info.pull:
            what = "unknown job type" if info is None else "not a pull job type"
            raise InvalidParameter(f"types[{i}]", f"{what}: {name!r}")
    check_worker_types(request, types, "types")
    principal = principal_of(request)
    worker = body.worker or (principal.name if principal is not None else "anonymous")

    async def attempt() -> list[tuple[Job, str]]:
        return await service.store.pull_fetch(types, body.count, worker, service.clock())

    taken = await service.fetches.take(types, body.wait, attempt, request.is_disconnected)
    return FetchOut(jobs=[_out(service, job, token) for job, token in taken])


async def _held(request: Request, job_id: int, token: str) -> tuple[Job, str]:
    """The job ``token`` holds in flight (else 404 or 409), of a type the caller serves,
    and its per-attempt key (under which its reports travel)."""
    service: Service = request.app.state.service
    job = await service.store.pull_claimed_job(job_id, token)
    check_worker_types(request, [job.type], "id")
    if job.correlation_key is None:  # claimed by a hipq that built no pull key
        raise InvalidParameter("id", f"job {job_id} is not a pull job")
    return job, job.correlation_key


async def _outcome(request: Request, job: Job, report: Any) -> ReportAccepted:
    service: Service = request.app.state.service
    await service.responses.write(report)
    return ReportAccepted(job_id=job.id, attempt=job.attempt)


_REPORT_NOTE = (
    " The token must be that of the job's fetch, for the attempt in flight: a job that "
    "timed out, was cancelled or settled, or was fetched again in a later attempt, answers "
    "409 (field `token`) and the report changes nothing. The report is stored at once "
    "(202) and settles the job at its queue loop's next tick; a second report for the "
    "same attempt changes nothing."
)


@router.post(
    "/jobs/{job_id}/complete",
    dependencies=[Depends(WorkerAccess())],
    status_code=202,
    response_model=ReportAccepted,
    responses=_ERRORS,
    summary="A fetched job succeeded, with its result",
    description="The job completes with `result`." + _REPORT_NOTE,
)
async def complete(job_id: JobId, body: CompleteIn, request: Request) -> ReportAccepted:
    check_body(body.result, "result")
    job, key = await _held(request, job_id, body.token)
    return await _outcome(request, job, reports.completed(key, job.type, body.result))


@router.post(
    "/jobs/{job_id}/fail",
    dependencies=[Depends(WorkerAccess())],
    status_code=202,
    response_model=ReportAccepted,
    responses=_ERRORS,
    summary="A fetched job's attempt failed",
    description=(
        "The attempt fails with `error` (and `traceback`, kept on the attempt); its retry "
        "strategy decides, unless `retryable` is false." + _REPORT_NOTE
    ),
)
async def fail(job_id: JobId, body: FailIn, request: Request) -> ReportAccepted:
    check_body({"error": body.error, "traceback": body.traceback}, "body")
    job, key = await _held(request, job_id, body.token)
    report = reports.failed(key, job.type, body.error, body.retryable, body.traceback)
    return await _outcome(request, job, report)


@router.post(
    "/jobs/{job_id}/snooze",
    dependencies=[Depends(WorkerAccess())],
    status_code=202,
    response_model=ReportAccepted,
    responses=_ERRORS,
    summary="Run a fetched job again later, without spending an attempt",
    description="The job goes back to wait `seconds`; its attempt is given back." + _REPORT_NOTE,
)
async def snooze(job_id: JobId, body: SnoozeIn, request: Request) -> ReportAccepted:
    check_body(body.reason, "reason")
    job, key = await _held(request, job_id, body.token)
    report = reports.snoozed(key, job.type, body.seconds, body.reason)
    return await _outcome(request, job, report)


async def _beat(
    request: Request,
    job_id: int,
    body: HeartbeatIn | CheckpointIn,
    progress: Any,
    keep_progress: bool,
    checkpoint: dict[str, Any] | None,
) -> BeatAccepted:
    service: Service = request.app.state.service
    job, key = await _held(request, job_id, body.token)
    config = service.job_types[job.type].config
    seconds = body.extend_by or config.heartbeat_timeout or job.timeout_seconds
    beat, _new = await service.store.heartbeat_record(
        key,
        job.type,
        progress,
        service.clock(),
        seconds,
        keep_progress=keep_progress,
        checkpoint=checkpoint,
    )
    return BeatAccepted(job_id=job.id, attempt=beat.attempt, deadline=beat.deadline)


@router.post(
    "/jobs/{job_id}/heartbeat",
    dependencies=[Depends(WorkerAccess())],
    status_code=202,
    response_model=BeatAccepted,
    responses=_ERRORS,
    summary="A worker is still on a fetched job (how far it got)",
    description=(
        "The attempt's deadline becomes now plus `extend_by` seconds (default: the type's "
        "`heartbeat_timeout`, else the job's timeout), taken by the queue's loop within a "
        f"few seconds. `progress` (at most {PROGRESS_MAX_BYTES} bytes of JSON) is shown as "
        "`heartbeat.progress` on GET /v1/jobs/{id}; without one the last stays." + _REPORT_NOTE
    ),
)
async def heartbeat(job_id: JobId, body: HeartbeatIn, request: Request) -> BeatAccepted:
    given = "progress" in body.model_fields_set
    if given:
        check_body(body.progress, "progress")
        if len(orjson.dumps(body.progress)) > PROGRESS_MAX_BYTES:
            raise InvalidParameter("progress", f"the progress is over {PROGRESS_MAX_BYTES} bytes")
    return await _beat(request, job_id, body, body.progress, not given, None)


@router.post(
    "/jobs/{job_id}/checkpoint",
    dependencies=[Depends(WorkerAccess())],
    status_code=202,
    response_model=BeatAccepted,
    responses=_ERRORS,
    summary="Keep a fetched job's payload for its retries (and heartbeat)",
    description=(
        "`payload` becomes the job's payload when the queue's loop takes it (as a python "
        "handler's `checkpoint()`): a retry starts from it. It also moves the deadline as a "
        "heartbeat does." + _REPORT_NOTE
    ),
)
async def checkpoint(job_id: JobId, body: CheckpointIn, request: Request) -> BeatAccepted:
    check_body(body.payload, "payload")
    return await _beat(request, job_id, body, None, True, body.payload)
