"""Pull workers: ``POST /v1/workers/fetch`` hands out claimed jobs with an attempt
token, ``POST /v1/workers/reports`` takes many outcomes in one request, and
``/v1/workers/jobs/{id}/...`` takes a worker's reports on one job.

An outcome is checked against its token and taken once per claim in the transaction
that stores it (``hipq.store.pull_claims``): a stale token, or a second, different
outcome for the claim, is a 409 and changes nothing. It travels as an external
system's answer does: in the inbox, under the job's per-claim key; a heartbeat or
checkpoint as a heartbeat. The queue's owner settles it at its tick (``hipq.pull``).
A job of a type outside a restricted token's answers as one that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from hipq.api.auth import WorkerAccess, check_worker_types, principal_of
from hipq.api.callbacks import PROGRESS_MAX_BYTES
from hipq.api.errors import InvalidParameter
from hipq.api.long_polls import LongPolls, TooManyWaits
from hipq.api.models import ErrorOut, JobId
from hipq.ingest.group_commit import GroupCommit
from hipq.ingest.response_intake import check_body
from hipq.ingest.response_writer import emit_stored
from hipq.jobs import Job
from hipq.pull import reports
from hipq.pull.waiters import MAX_WAIT_SECONDS
from hipq.service import Service
from hipq.store import NewResponse, NotFound, PullReport, StoreError
from hipq.transports.python import MAX_SNOOZE_SECONDS

router = APIRouter(prefix="/v1/workers", tags=["workers"])

# The most jobs one fetch takes, and the most outcomes one request of reports carries.
MAX_FETCH = 1000
MAX_REPORTS = 1000
_ERRORS: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorOut},
    404: {"model": ErrorOut},
    409: {"model": ErrorOut},
    422: {"model": ErrorOut},
}
# Builds a report's inbox row from the job's key and type (``hipq.pull.reports``).
Build = Callable[[str, str], NewResponse]


class _In(BaseModel):
    model_config = {"extra": "forbid"}


class FetchIn(_In):
    types: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        min_length=1, description="the pull job types this worker runs"
    )
    count: int = Field(1, ge=1, le=MAX_FETCH, description="at most this many jobs")
    weight: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="at most this total weight of jobs (a worker's free capacity); a job "
        "heavier than what is left is left for another fetch",
    )
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


class _Outcome(_In):
    id: int = Field(ge=1, le=2**63 - 1, description="the job's id")
    token: str = Field(min_length=1, max_length=200, description="the token of its fetch")


class CompletedReport(_Outcome):
    outcome: Literal["completed"] = Field(description="the job succeeded")
    result: Any = Field(None, description="the job's result (JSON)")


class FailedReport(_Outcome):
    outcome: Literal["failed"] = Field(description="the attempt failed")
    error: str = Field(min_length=1, max_length=10_000, description="why the attempt failed")
    retryable: bool = Field(True, description="false: the job fails now")
    traceback: str | None = Field(None, max_length=65_536, description="kept on the attempt")


class SnoozedReport(_Outcome):
    outcome: Literal["snoozed"] = Field(
        description="run the job again later, without spending an attempt"
    )
    seconds: float = Field(ge=0, le=MAX_SNOOZE_SECONDS, description="run again after this")
    reason: str | None = Field(None, max_length=1000, description="shown as its last error")


OutcomeIn = Annotated[
    CompletedReport | FailedReport | SnoozedReport, Field(discriminator="outcome")
]


class ReportsIn(_In):
    reports: list[OutcomeIn] = Field(
        min_length=1, max_length=MAX_REPORTS, description="outcomes of fetched jobs"
    )


class ReportResult(BaseModel):
    id: int = Field(description="the job reported on")
    status: Literal["accepted", "conflict", "not_found"] = Field(
        description="accepted: stored (or stored before, the same), settled at the next "
        "tick; conflict: the token does not hold the job's claim now, or the claim took "
        "another outcome (nothing changed); not_found: no such job"
    )
    attempt: int | None = Field(None, description="the attempt the report is for (accepted)")
    field: str | None = Field(None, description="what was refused (conflict, not_found)")
    message: str | None = Field(None, description="why it was refused")


class ReportsOut(BaseModel):
    results: list[ReportResult] = Field(description="one per report, in the request's order")


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
        "retry strategy says (and may then be fetched again). With `weight`, the jobs "
        "taken weigh at most that together. A type that is not a pull type is a 422 naming "
        "`types`; one outside a token's `type=` restriction a 403. A token holds at most "
        "`server.max_waits_per_token` waiting requests (fetches with `wait`, GET "
        "/v1/jobs/{id}?wait=) at once: one more is a 429 with Retry-After."
    ),
)
async def fetch(body: FetchIn, request: Request) -> FetchOut | JSONResponse:
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
        now = service.clock()
        return await service.store.pull_fetch(types, body.count, worker, now, body.weight)

    if body.wait <= 0:
        taken = await attempt()
    else:
        # A waiting fetch holds a connection: bounded per token, as GET ?wait= is.
        long_polls: LongPolls = request.app.state.long_polls
        try:
            with long_polls.hold(request):
                taken = await service.fetches.take(
                    types, body.wait, attempt, request.is_disconnected
                )
        except TooManyWaits as refused:
            return refused.answer()
    return FetchOut(jobs=[_out(service, job, token) for job, token in taken])


def _served_types(request: Request) -> frozenset[str] | None:
    """The job types a restricted worker token serves (None: any)."""
    principal = principal_of(request)
    return None if principal is None or principal.types is None else frozenset(principal.types)


async def _held(request: Request, job_id: int, token: str) -> tuple[Job, str]:
    """The job ``token`` holds in flight with no outcome reported (else 404 or 409), of
    a type the caller serves, and its per-claim key (under which its reports travel)."""
    service: Service = request.app.state.service
    job = await service.store.pull_claimed_job(job_id, token)
    served = _served_types(request)
    if served is not None and job.type not in served:
        raise NotFound(f"job {job_id} does not exist", field="id")
    assert job.correlation_key is not None  # checked with the claim
    return job, job.correlation_key


class PullReportWriter(GroupCommit[PullReport, Job]):
    """Workers' outcomes taken together: those of the routes of one job that arrive
    while a transaction runs share the next (a worker's many simultaneous reports
    cost a few transactions and connections, not one each); a request of many
    reports is one group of its own."""

    name = "pull-report-writer"

    def __init__(self, service: Service) -> None:
        super().__init__()
        self._service = service

    async def take(self, reports: list[PullReport]) -> list[Job | StoreError]:
        """Take ``reports`` in one transaction: each one's job, or why it was refused."""
        service = self._service
        taken, stored = await service.store.pull_report(
            reports, service.clock(), service.settings.responses.ttl
        )
        if stored:
            emit_stored(service.events, stored)
        return taken

    async def write_group(self, items: list[PullReport]) -> Sequence[Job | Exception]:
        return await self.take(items)


def _report(request: Request, job_id: int, token: str, build: Build) -> PullReport:
    return PullReport(job_id, token, build, _served_types(request))


async def _outcome(request: Request, job_id: int, token: str, build: Build) -> ReportAccepted:
    writer: PullReportWriter = request.app.state.pull_reports
    job = await writer.submit(_report(request, job_id, token, build))
    return ReportAccepted(job_id=job.id, attempt=job.attempt)


_REPORT_NOTE = (
    " The token must be that of the job's fetch, for the attempt in flight: a job that "
    "timed out, was cancelled or settled, or was fetched again in a later attempt, answers "
    "409 (field `token`) and the report changes nothing. The report is stored at once "
    "(202) and settles the job at its queue loop's next tick. A claim takes one outcome: "
    "the same report sent again (after a lost answer) is a 202 that changes nothing, and "
    "another outcome for the same claim (a complete after a snooze) is a 409 and changes "
    "nothing. A job of a type outside a restricted token's `type=` answers as one that "
    "does not exist (404)."
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
    result = body.result
    return await _outcome(
        request, job_id, body.token, lambda key, kind: reports.completed(key, kind, result)
    )


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

    def build(key: str, kind: str) -> NewResponse:
        return reports.failed(key, kind, body.error, body.retryable, body.traceback)

    return await _outcome(request, job_id, body.token, build)


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

    def build(key: str, kind: str) -> NewResponse:
        return reports.snoozed(key, kind, body.seconds, body.reason)

    return await _outcome(request, job_id, body.token, build)


def _builder(report: CompletedReport | FailedReport | SnoozedReport) -> Build:
    if isinstance(report, CompletedReport):
        return lambda key, kind: reports.completed(key, kind, report.result)
    if isinstance(report, FailedReport):
        return lambda key, kind: reports.failed(
            key, kind, report.error, report.retryable, report.traceback
        )
    return lambda key, kind: reports.snoozed(key, kind, report.seconds, report.reason)


def _checked(i: int, report: CompletedReport | FailedReport | SnoozedReport) -> None:
    where = f"reports[{i}]"
    if isinstance(report, CompletedReport):
        check_body(report.result, f"{where}.result")
    elif isinstance(report, FailedReport):
        check_body({"error": report.error, "traceback": report.traceback}, where)
    else:
        check_body(report.reason, f"{where}.reason")


@router.post(
    "/reports",
    dependencies=[Depends(WorkerAccess())],
    response_model=ReportsOut,
    responses={422: {"model": ErrorOut}},
    summary="Outcomes of many fetched jobs in one request",
    description=(
        "Each report names a job by `id`, carries its fetch's `token` and says its "
        "`outcome`: `completed` (with `result`), `failed` (`error`, `retryable`, "
        "`traceback`) or `snoozed` (`seconds`, `reason`), as the routes of one job do. "
        f"At most {MAX_REPORTS} reports; all are checked and stored in one transaction. "
        "The answer (200) has one result per report, in order: `accepted` (stored, or the "
        "same report stored before), `conflict` (a stale or foreign token, or another "
        "outcome taken for the claim: nothing changed) or `not_found`. A body that does "
        "not parse, or a report holding \\u0000, is a 422 naming the field, and nothing "
        "is stored."
    ),
)
async def report_many(body: ReportsIn, request: Request) -> ReportsOut:
    for i, report in enumerate(body.reports):
        _checked(i, report)
    writer: PullReportWriter = request.app.state.pull_reports
    taken = await writer.take([_report(request, r.id, r.token, _builder(r)) for r in body.reports])
    results = []
    for report, verdict in zip(body.reports, taken, strict=True):
        if isinstance(verdict, StoreError):
            status: Literal["conflict", "not_found"] = (
                "not_found" if isinstance(verdict, NotFound) else "conflict"
            )
            results.append(
                ReportResult(
                    id=report.id, status=status, field=verdict.field, message=verdict.message
                )
            )
        else:
            results.append(ReportResult(id=report.id, status="accepted", attempt=verdict.attempt))
    return ReportsOut(results=results)


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
