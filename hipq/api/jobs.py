"""/v1/jobs: create (one or a batch), read, list, cancel, change, retry."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from hipq import tracing
from hipq.api.auth import check_tenancy, require
from hipq.api.json_body import JSONBodyRoute, off_loop
from hipq.api.models import (
    MAX_ID,
    ErrorOut,
    JobBatchIn,
    JobBatchOut,
    JobIn,
    JobListOut,
    JobOut,
    JobPatch,
    RetryRequest,
)
from hipq.api.paging import Cursor, json_size, within_budget
from hipq.intake import NUL_MESSAGE, IntakeError, nul_field
from hipq.jobs import NewJob
from hipq.lifecycle import State
from hipq.service import Service
from hipq.store import JobFilter

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=JSONBodyRoute)

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut},
    409: {"model": ErrorOut},
    413: {"model": ErrorOut},
    422: {"model": ErrorOut},
}
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=300,
        description="a retried POST with the same key returns the first one's jobs",
    ),
]
# Each label filter is a condition of the query: SQLite refuses a thousand of them.
MAX_LABEL_FILTERS = 20
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="the job's id")]


def _service(request: Request) -> Service:
    return request.app.state.service


def _request_hash(body: Any) -> str:
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


async def _body_size(request: Request) -> int:
    return len(await request.body())


async def _insert(
    request: Request, items: list[JobIn], key: str | None, prefix: str, grouped: bool = False
) -> Any:
    service = _service(request)
    now = service.clock()

    def resolve() -> tuple[list[NewJob], tuple[str, str] | None]:
        new = []
        for i, item in enumerate(items):
            try:
                new.append(service.intake.resolve(item.fields_set(), now))
            except IntakeError as exc:
                raise IntakeError(
                    f"{prefix}{i}].{exc.field}" if prefix else exc.field, exc.message
                ) from None
        idempotency = None
        if key:
            # Dumping every job again to hash the request costs as much as validating it:
            # only a keyed request pays for it.
            body = [item.model_dump(mode="json", exclude_unset=True) for item in items]
            idempotency = (key, _request_hash(body))
        return new, idempotency

    # Resolving walks every payload (the NUL check): a big body's, off the event loop.
    new, idempotency = await off_loop(await _body_size(request), resolve)
    check_tenancy(request, new, prefix)
    # The store wakes the queues' loops once the jobs are committed.
    with tracing.enqueue_span(request.headers, new) as traced:
        if grouped:  # shares a transaction with the other requests waiting (group commit)
            return await service.job_writer.insert(list(traced), idempotency)
        return await service.store.job_insert_many(list(traced), now, idempotency)


@router.post(
    "",
    dependencies=[Depends(require("submit"))],
    status_code=201,
    response_model=JobOut,
    responses=_ERRORS,
    summary="Create a job",
)
async def create_job(
    job: JobIn, request: Request, response: Response, idempotency_key: IdempotencyKey = None
) -> JobOut:
    result = await _insert(request, [job], idempotency_key, "", grouped=True)
    if result.replayed:
        response.status_code = 200
        response.headers["Idempotent-Replayed"] = "true"
    return JobOut.of(result.jobs[0])


@router.post(
    "/batch",
    dependencies=[Depends(require("submit"))],
    status_code=201,
    response_model=JobBatchOut,
    responses=_ERRORS,
    summary="Create many jobs in one transaction (all or none)",
)
async def create_jobs(
    batch: JobBatchIn,
    request: Request,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    limit = _service(request).settings.server.max_batch_jobs
    if len(batch.jobs) > limit:
        raise IntakeError("jobs", f"at most {limit} jobs per batch, got {len(batch.jobs)}")
    result = await _insert(request, batch.jobs, idempotency_key, "jobs[")
    # The JobBatchOut body, written by orjson: a JobRef model per job cost about a tenth of
    # the whole request. OPT_UTC_Z writes instants exactly as pydantic does.
    refs = [
        {"id": j.id, "state": j.state.value, "queue": j.queue, "run_at": j.run_at}
        for j in result.jobs
    ]
    return Response(
        orjson.dumps({"count": len(refs), "jobs": refs}, option=orjson.OPT_UTC_Z),
        status_code=200 if result.replayed else 201,
        media_type="application/json",
        headers={"Idempotent-Replayed": "true"} if result.replayed else None,
    )


@router.get(
    "/{job_id}",
    dependencies=[Depends(require("read"))],
    response_model=JobOut,
    responses=_ERRORS,
    summary="A job and its attempts",
)
async def get_job(job_id: JobId, request: Request) -> JobOut:
    store = _service(request).store
    job = await store.job_get(job_id)
    return JobOut.of(job, await store.job_attempts(job_id), await store.heartbeat_of(job_id))


@router.get(
    "",
    dependencies=[Depends(require("read"))],
    response_model=JobListOut,
    responses=_ERRORS,
    summary="List jobs, newest first",
)
async def list_jobs(
    request: Request,
    queue: str | None = None,
    state: Annotated[list[State] | None, Query(description="repeat for several")] = None,
    type: str | None = None,
    label: Annotated[list[str] | None, Query(description="name:value, repeat for several")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Cursor = None,
) -> JobListOut:
    for name, value in (("queue", queue), ("type", type), ("label", label)):
        if nul_field(value, name):
            raise IntakeError(name, NUL_MESSAGE)
    if label is not None and len(label) > MAX_LABEL_FILTERS:
        raise IntakeError("label", f"at most {MAX_LABEL_FILTERS} label filters, got {len(label)}")
    labels: dict[str, str] = {}
    for item in label or []:
        name, sep, value = item.partition(":")
        if not sep or not name:
            raise IntakeError("label", f"{item!r} must look like name:value")
        labels[name] = value
    flt = JobFilter(
        queue=queue,
        states=tuple(s.value for s in state or ()),
        type=type,
        labels=labels,
        after_id=after,
        limit=limit,
    )
    found = await _service(request).store.job_list(flt)
    page = within_budget(found, lambda j: json_size(j.payload, j.result))
    next_cursor = str(page[-1].id) if len(found) == limit or len(page) < len(found) else None
    return JobListOut(jobs=[JobOut.of(j) for j in page], next_cursor=next_cursor)


@router.post(
    "/{job_id}/cancel",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_ERRORS,
    summary="Cancel a job (a running one is cancelled by its queue's loop)",
)
async def cancel_job(job_id: JobId, request: Request, response: Response) -> JobOut:
    service = _service(request)
    job = await service.store.job_cancel(job_id, service.clock())
    if job.state != State.CANCELLED:
        response.status_code = 202  # requested: the loop settles it at its next tick
    return JobOut.of(job)


@router.patch(
    "/{job_id}",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_ERRORS,
    summary="Change a scheduled job (run_at, priority, payload, weight, labels, ...)",
)
async def patch_job(job_id: JobId, patch: JobPatch, request: Request) -> JobOut:
    service = _service(request)
    intake = service.intake
    changes = await off_loop(
        await _body_size(request),
        lambda: intake.check_changes(patch.model_dump(exclude_unset=True)),
    )
    # The job is read and changed in one transaction: the change is resolved against
    # the job as it is while locked. The store wakes the queue's loop (in this process
    # and, by NOTIFY, in others).
    job = await service.store.job_update_pending(
        job_id,
        changes,
        service.clock(),
        resolve=lambda current: intake.resolve_changes(current, changes),
    )
    return JobOut.of(job)


@router.post(
    "/{job_id}/retry",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_ERRORS,
    summary="Run a failed or cancelled job again (a new attempt)",
)
async def retry_job(job_id: JobId, request: Request, body: RetryRequest | None = None) -> JobOut:
    service = _service(request)
    job = await service.store.job_retry(job_id, service.clock(), body.run_at if body else None)
    return JobOut.of(job)
