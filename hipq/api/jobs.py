"""/v1/jobs: create (one or a batch), read, list, change, retry, and the operator's
verbs on one job (cancel, complete, fail, reschedule, delete; by id or by job_key)."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from hipq.api.answers import json_answer
from hipq.api.arrival import since_arrival
from hipq.api.auth import check_names, owner_of, principal_of, require
from hipq.api.batches import tenant_batch
from hipq.api.errors import InvalidParameter
from hipq.api.json_body import JSONBodyRoute, off_loop
from hipq.api.long_polls import LongPolls, TooManyWaits
from hipq.api.models import (
    BatchIn,
    CancelRequest,
    CompleteRequest,
    ErrorOut,
    FailRequest,
    JobBatchIn,
    JobBatchOut,
    JobId,
    JobIn,
    JobListOut,
    JobOut,
    JobPatch,
    RescheduleRequest,
    RetryRequest,
    job_body,
)
from hipq.api.paging import Cursor, json_size, within_budget
from hipq.api.why_waiting import explained
from hipq.dependencies import job_field
from hipq.durations import parse_duration
from hipq.ingest.job_intake import NUL_MESSAGE, IntakeError, nul_field
from hipq.jobs import NewJob
from hipq.lifecycle import IN_FLIGHT, State
from hipq.observability import tracing
from hipq.operator_requests import Reschedule, RetryRefused
from hipq.process.job_waiters import MAX_WAIT_SECONDS
from hipq.service import Service
from hipq.store import BadReference, JobFilter

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=JSONBodyRoute)
# The creating routes, included first of all the routers: FastAPI tries the included
# routers in order, and the single-job POST is the API's hottest route.
creating = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=JSONBodyRoute)

# Each route's own answers; the errors every route shares (422, 413, 503, the guards'
# and the token's) are declared by hipq.api.contract.
_Responses = dict[int | str, dict[str, Any]]
_NOT_FOUND: _Responses = {404: {"model": ErrorOut, "description": "no such job"}}
_ERRORS: _Responses = {
    **_NOT_FOUND,
    409: {
        "model": ErrorOut,
        "description": "the job's state does not allow it, or its key is held by another open job",
    },
}


def _replayed(model: Any) -> _Responses:
    """The answer to a request sent again with its Idempotency-Key: what the first got."""
    return {
        200: {
            "model": model,
            "description": "The same Idempotency-Key and body again: the first request's "
            "jobs, as stored now (nothing new is created)",
            "headers": {
                "Idempotent-Replayed": {
                    "description": "true: this answers a request already carried out",
                    "schema": {"type": "string"},
                }
            },
        }
    }


_CREATE_ERRORS: _Responses = {
    403: {
        "model": ErrorOut,
        "description": "A valid token without the submit scope, restricted to other "
        "queues or job types, or whose job limits do not allow what a job sets "
        "(`field` names the job's queue, type, notify, labels.<name>, priority or critical)",
    },
    409: {
        "model": ErrorOut,
        "description": "the Idempotency-Key was used with another body, or the "
        "correlation_key is held by an open job, or the batch a job joins (batch_id) "
        "finished already",
    },
}
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=300,
        description="a retried POST with the same key returns the first one's jobs; "
        "keys are per token (another token's same key is another request)",
    ),
]
# Each label filter is a condition of the query: SQLite refuses a thousand of them.
MAX_LABEL_FILTERS = 20


def wait_seconds(raw: str) -> float:
    """The ``wait`` query parameter in seconds, bounded by ``MAX_WAIT_SECONDS``."""
    try:
        seconds = parse_duration(raw)
    except ValueError as exc:
        raise InvalidParameter("wait", str(exc)) from None
    if seconds > MAX_WAIT_SECONDS:
        raise InvalidParameter("wait", f"must be at most {MAX_WAIT_SECONDS:g}s, got {raw!r}")
    return seconds


def _service(request: Request) -> Service:
    return request.app.state.service


def _request_hash(body: Any) -> str:
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _scoped_key(request: Request, key: str) -> str:
    """The Idempotency-Key as stored: one namespace per token, so that a caller who
    learns or guesses another's key gets a job of its own, never theirs (and its
    result). Without tokens there is one caller, and the key is stored as given."""
    principal = principal_of(request)
    if principal is None or not principal.authenticated:
        return key
    scoped = f"{principal.name}\n{key}".encode("utf-8", "surrogatepass")
    return "token:" + hashlib.sha256(scoped).hexdigest()


async def _body_size(request: Request) -> int:
    return len(await request.body())


async def _insert(
    request: Request,
    items: list[JobIn],
    key: str | None,
    prefix: str,
    grouped: bool = False,
    batch: BatchIn | None = None,
) -> Any:
    service = _service(request)
    now = service.clock()
    scoped_key = _scoped_key(request, key) if key else ""
    caller = principal_of(request)
    names = [{"type": i.type, "queue": i.queue, "notify": i.notify} for i in items]
    check_names(request, names, prefix)

    def resolve() -> tuple[list[NewJob], tuple[str, str] | None]:
        new = []
        for i, item in enumerate(items):
            try:
                new.append(service.intake.resolve(item.fields_set(), now, caller))
            except IntakeError as exc:
                if not prefix:
                    raise
                raise exc.within(f"{prefix}{i}].") from None
        idempotency = None
        if key:
            # Dumping every job again to hash the request costs as much as validating it:
            # only a keyed request pays for it.
            body: Any = [item.model_dump(mode="json", exclude_unset=True) for item in items]
            if batch is not None:
                body = [body, batch.model_dump(mode="json", exclude_unset=True)]
            idempotency = (scoped_key, _request_hash(body))
        return new, idempotency

    # Resolving walks every payload (the NUL check): a big body's, off the event loop.
    new, idempotency = await off_loop(await _body_size(request), resolve)
    joining = [i for i, j in enumerate(new) if j.batch_id is not None]
    if joining and batch is not None:
        raise IntakeError(
            f"{prefix}{joining[0]}].batch_id",
            "the request makes a batch (batch) that its jobs join: give one or the other",
        )
    made = tenant_batch(request, batch, now)
    unseen = await service.store.batch_unseen(
        [new[i].batch_id or 0 for i in joining], owner_of(request)
    )
    # Another tenant's batch, answered as one that does not exist before anything is
    # written (the join's own statement refuses it too, in the store).
    if unseen is not None:
        place = next(i for i in joining if new[i].batch_id == unseen)
        raise BadReference(f"batch {unseen} does not exist", job_field(place, len(new), "batch_id"))
    # The store wakes the queues' loops once the jobs are committed.
    with tracing.enqueue_span(request.headers, new) as traced:
        if grouped:  # shares a transaction with the other requests waiting (group commit)
            return await service.job_writer.insert(list(traced), idempotency)
        return await service.store.job_insert_many(list(traced), now, idempotency, made)


@creating.post(
    "",
    dependencies=[Depends(require("submit"))],
    status_code=201,
    response_model=JobOut,
    responses={**_replayed(JobOut), **_CREATE_ERRORS},
    summary="Create a job",
)
async def create_job(
    job: JobIn, request: Request, idempotency_key: IdempotencyKey = None
) -> Response:
    result = await _insert(request, [job], idempotency_key, "", grouped=True)
    if result.replayed:
        return json_answer(job_body(result.jobs[0]), 200, {"Idempotent-Replayed": "true"})
    return json_answer(job_body(result.jobs[0]), 201)


@creating.post(
    "/batch",
    dependencies=[Depends(require("submit"))],
    status_code=201,
    response_model=JobBatchOut,
    responses={**_replayed(JobBatchOut), **_CREATE_ERRORS},
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
    result = await _insert(request, batch.jobs, idempotency_key, "jobs[", batch=batch.batch)
    # The JobBatchOut body, written by orjson: a JobRef model per job cost about a tenth of
    # the whole request.
    refs = [
        {"id": j.id, "state": j.state.value, "queue": j.queue, "run_at": j.own_run_at}
        for j in result.jobs
    ]
    return json_answer(
        {"batch_id": result.jobs[0].batch_id, "count": len(refs), "jobs": refs},
        200 if result.replayed else 201,
        {"Idempotent-Replayed": "true"} if result.replayed else None,
    )


@router.get(
    "/{job_id}",
    dependencies=[Depends(require("read"))],
    response_model=JobOut,
    responses={
        **_NOT_FOUND,
        429: {"model": ErrorOut, "description": "this token already holds its `?wait=` requests"},
    },
    summary="A job and its attempts; with ?wait=, once it is finished or the wait ends",
    description=(
        "With `?wait=`, the answer is held until the job is finished or the wait ends. "
        "Each token holds at most `server.max_waits_per_token` such requests at once "
        "(a hipq without tokens has no such bound); one more is answered 429 "
        "with `Retry-After`."
    ),
)
async def get_job(
    job_id: JobId,
    request: Request,
    wait: Annotated[
        str | None,
        Query(
            max_length=20,
            description=(
                "answer when the job reaches a terminal state or after this long, "
                "whichever comes first: a duration such as '30s' (at most 60s)"
            ),
        ),
    ] = None,
) -> Response:
    service = _service(request)
    if wait is None:  # the job, its attempts and its heartbeat on one connection
        view = await service.store.job_view(job_id)
        (job,) = await explained(service.store, service.clock, [view.job])
        return json_answer(job_body(job, view.attempts, view.heartbeat))
    # The wait counts from the request's arrival, however long it queued behind others.
    seconds = wait_seconds(wait) - since_arrival(request.scope)
    long_polls: LongPolls = request.app.state.long_polls
    try:
        with long_polls.hold(request):
            view = await service.waiters.wait(job_id, seconds)
    except TooManyWaits as refused:
        return refused.answer()
    (job,) = await explained(service.store, service.clock, [view.job])
    return json_answer(job_body(job, view.attempts, view.heartbeat))


@router.get(
    "",
    dependencies=[Depends(require("read"))],
    response_model=JobListOut,
    summary="List jobs, newest first",
)
async def list_jobs(
    request: Request,
    queue: Annotated[str | None, Query(description="jobs of this queue")] = None,
    state: Annotated[list[State] | None, Query(description="repeat for several")] = None,
    type: Annotated[str | None, Query(description="jobs of this job type")] = None,
    label: Annotated[list[str] | None, Query(description="name:value, repeat for several")] = None,
    job_key: Annotated[
        str | None, Query(max_length=500, description="jobs with this job_key")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="jobs per page at most")] = 100,
    after: Cursor = None,
) -> Response:
    for name, value in (("queue", queue), ("type", type), ("label", label), ("job_key", job_key)):
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
        job_key=job_key,
        after_id=after,
        limit=limit,
    )
    service = _service(request)
    found = await service.store.job_list(flt)
    page = await explained(
        service.store, service.clock, within_budget(found, lambda j: json_size(j.payload, j.result))
    )
    next_cursor = str(page[-1].id) if len(found) == limit or len(page) < len(found) else None
    return json_answer({"jobs": [job_body(j) for j in page], "next_cursor": next_cursor})


def _verb_response(job: Any) -> Response:
    # 202: requested, the queue's loop applies it at its next tick.
    return json_answer(job_body(job), 202 if job.state in IN_FLIGHT else 200)


_VERB_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    202: {"model": JobOut, "description": "the job is in flight: its queue's loop applies it"},
}


@router.post(
    "/{job_id}/cancel",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_VERB_ERRORS,
    summary="Cancel a job (a running one is cancelled by its queue's loop)",
)
async def cancel_job(
    job_id: JobId, request: Request, body: CancelRequest | None = None
) -> Response:
    service = _service(request)
    reason = body.reason if body else None
    return _verb_response(await service.store.job_cancel(job_id, service.clock(), reason))


@router.post(
    "/{job_id}/complete",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_VERB_ERRORS,
    summary="Complete an open job with a result (one in flight: by its queue's loop)",
)
async def complete_job(
    job_id: JobId, request: Request, body: CompleteRequest | None = None
) -> Response:
    service = _service(request)
    result = body.result if body else None
    job = await service.store.job_complete(job_id, service.clock(), result)
    return _verb_response(job)


@router.post(
    "/{job_id}/fail",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_VERB_ERRORS,
    summary="Fail an open job for good, with a reason (no retry)",
)
async def fail_job(job_id: JobId, body: FailRequest, request: Request) -> Response:
    service = _service(request)
    job = await service.store.job_fail(job_id, service.clock(), body.reason)
    return _verb_response(job)


@router.post(
    "/{job_id}/reschedule",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_VERB_ERRORS,
    summary="Run a job again later: run_at or run_in, priority, attempts, max_attempts",
)
async def reschedule_job(
    job_id: JobId, request: Request, body: RescheduleRequest | None = None
) -> Response:
    service = _service(request)
    now = service.clock()
    body = body or RescheduleRequest()
    change = Reschedule(
        run_at=service.intake.run_at(body.run_at, body.run_in, now)
        if body.run_at or body.run_in is not None
        else None,
        priority=body.priority,
        reset_attempts=body.reset_attempts,
        max_attempts=body.max_attempts,
    )
    try:
        return _verb_response(await service.store.job_reschedule(job_id, now, change))
    except RetryRefused as exc:  # nothing was written
        raise IntakeError(exc.field, exc.message) from None


@router.delete(
    "/{job_id}",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_ERRORS,
    summary="Delete a finished job and its attempts (returns it as it was)",
)
async def delete_job(job_id: JobId, request: Request) -> Response:
    return json_answer(job_body(await _service(request).store.job_delete(job_id)))


JobKey = Annotated[str, Path(min_length=1, max_length=500, description="a job_key")]


@router.get(
    "/by-key/{job_key:path}",
    dependencies=[Depends(require("read"))],
    response_model=JobOut,
    responses=_NOT_FOUND,
    summary="The open job that holds a job_key",
)
async def get_job_by_key(job_key: JobKey, request: Request) -> Response:
    if nul_field(job_key, "job_key"):
        raise IntakeError("job_key", NUL_MESSAGE)
    service = _service(request)
    store = service.store
    job = await store.job_by_key(job_key)
    (job,) = await explained(store, service.clock, [job])
    return json_answer(job_body(job, await store.job_attempts(job.id)))


@router.post(
    "/by-key/{job_key:path}/cancel",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_VERB_ERRORS,
    summary="Cancel the open job that holds a job_key",
)
async def cancel_job_by_key(job_key: JobKey, request: Request) -> Response:
    if nul_field(job_key, "job_key"):
        raise IntakeError("job_key", NUL_MESSAGE)
    service = _service(request)
    job = await service.store.job_by_key(job_key)
    return _verb_response(await service.store.job_cancel(job.id, service.clock()))


@router.patch(
    "/{job_id}",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_ERRORS,
    summary="Change a scheduled job (run_at, priority, payload, weight, labels, ...)",
)
async def patch_job(job_id: JobId, patch: JobPatch, request: Request) -> Response:
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
    return json_answer(job_body(job))


@router.post(
    "/{job_id}/retry",
    dependencies=[Depends(require("operate"))],
    response_model=JobOut,
    responses=_ERRORS,
    summary="Run a failed or cancelled job again (a new attempt)",
)
async def retry_job(job_id: JobId, request: Request, body: RetryRequest | None = None) -> Response:
    service = _service(request)
    job = await service.store.job_retry(job_id, service.clock(), body.run_at if body else None)
    return json_answer(job_body(job))
