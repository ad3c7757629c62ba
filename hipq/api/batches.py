"""/v1/batches: batches of jobs, their counts; made open here (jobs join them by id,
then they are sealed) or by a batch POST with ``batch`` (sealed at once)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from hipq.api.answers import json_answer
from hipq.api.auth import check_batch_names, owner_of, principal_of, require
from hipq.api.json_body import JSONBodyRoute
from hipq.api.models import (
    ASCII_DIGITS,
    MAX_ID,
    BatchIn,
    BatchListOut,
    BatchOut,
    ErrorOut,
    JobListOut,
    job_body,
)
from hipq.api.paging import Cursor, json_size, within_budget
from hipq.api.why_waiting import explained
from hipq.batches import Batch, NewBatch
from hipq.ingest.job_intake import Intake, IntakeError
from hipq.security.tokens import Principal
from hipq.service import Service

router = APIRouter(prefix="/v1/batches", tags=["batches"], route_class=JSONBodyRoute)
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "no such batch"}
}
BatchId = Annotated[int, Path(ge=1, le=MAX_ID, description="the batch's id"), ASCII_DIGITS]


def new_batch(
    intake: Intake, batch: BatchIn | None, now: datetime, caller: Principal | None = None
) -> NewBatch | None:
    """The batch a request asks for, its completion job and targets resolved (errors
    name ``batch.on_complete.<field>`` and ``batch.notify[i]``), owned by ``caller``'s
    tenant; its completion job is resolved for ``caller`` as the caller's own job is."""
    owner = caller.owner if caller is not None else None
    if batch is None:
        return None
    notify = None
    if batch.notify is not None:
        try:
            notify = intake.notify_targets(batch.notify, [])
        except IntakeError as exc:
            raise IntakeError("batch." + exc.field, exc.message) from None
    if batch.on_complete is None:
        return NewBatch(notify=notify, owner=owner)
    fields = batch.on_complete.model_dump(exclude_unset=True, exclude_none=True)
    try:
        completion = intake.resolve(fields, now, caller)
    except IntakeError as exc:
        raise exc.within("batch.on_complete.") from None
    return NewBatch(completion, notify, owner)


def tenant_batch(request: Request, batch: BatchIn | None, now: datetime) -> NewBatch | None:
    """``new_batch`` for the caller: owned by its tenant, its completion job and targets
    checked against its token as a job's are (403 naming ``batch.<field>``)."""
    if batch is None:
        return None
    on_complete = batch.on_complete
    completion = on_complete.model_dump(exclude_unset=True) if on_complete else None
    check_batch_names(request, completion, batch.notify)
    return new_batch(_service(request).intake, batch, now, principal_of(request))


def batch_out(batch: Batch) -> BatchOut:
    return BatchOut(**asdict(batch), pending=batch.pending, status=batch.status)


def _service(request: Request) -> Service:
    return request.app.state.service


@router.post(
    "",
    dependencies=[Depends(require("submit"))],
    status_code=201,
    response_model=BatchOut,
    responses={422: {"model": ErrorOut, "description": "an unknown type or target"}},
    summary="Make an open batch: jobs join it with batch_id until it is sealed",
    description=(
        "An open batch never finishes: jobs join it (`batch_id` on a job) and "
        "`POST /v1/batches/{id}/seal` closes it; it then finishes once none of its jobs "
        "is pending, runs its completion job and tells its `notify` targets, once."
    ),
)
async def create_batch(batch: BatchIn, request: Request) -> BatchOut:
    service = _service(request)
    now = service.clock()
    made = tenant_batch(request, batch, now)
    assert made is not None
    batch_id = await service.store.batch_open(made, now)
    return batch_out(await service.store.batch_get(batch_id))


@router.post(
    "/{batch_id}/seal",
    dependencies=[Depends(require("submit"))],
    response_model=BatchOut,
    responses=_ERRORS,
    summary="Seal a batch: it finishes once none of its jobs is pending (at once if none is)",
    description=(
        "Sealing a sealed or finished batch changes nothing and answers it as it is. "
        "A tenant's token (restricted to queues or job types) seals only the batches "
        "it made: another's is answered 404, as one that does not exist."
    ),
)
async def seal_batch(batch_id: BatchId, request: Request) -> BatchOut:
    service = _service(request)
    sealed = await service.store.batch_seal_now(batch_id, service.clock(), owner_of(request))
    return batch_out(sealed)


@router.get(
    "",
    dependencies=[Depends(require("read"))],
    response_model=BatchListOut,
    responses={422: {"model": ErrorOut}},
    summary="List batches, newest first",
)
async def list_batches(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000, description="batches per page")] = 100,
    after: Cursor = None,
) -> BatchListOut:
    found = await _service(request).store.batch_list(after, limit)
    return BatchListOut(
        batches=[batch_out(b) for b in found],
        next_cursor=str(found[-1].id) if len(found) == limit else None,
    )


@router.get(
    "/{batch_id}",
    dependencies=[Depends(require("read"))],
    response_model=BatchOut,
    responses=_ERRORS,
    summary="A batch's counts: pending, completed, failed, cancelled",
)
async def get_batch(batch_id: BatchId, request: Request) -> BatchOut:
    return batch_out(await _service(request).store.batch_get(batch_id))


@router.get(
    "/{batch_id}/jobs",
    dependencies=[Depends(require("read"))],
    response_model=JobListOut,
    responses=_ERRORS,
    summary="A batch's jobs, newest first",
)
async def list_batch_jobs(
    batch_id: BatchId,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000, description="jobs per page at most")] = 100,
    after: Cursor = None,
) -> Response:
    service = _service(request)
    store = service.store
    await store.batch_get(batch_id)  # 404 for no such batch, rather than an empty page
    found = await store.batch_jobs(batch_id, after, limit)
    page = await explained(
        store, service.clock, within_budget(found, lambda j: json_size(j.payload, j.result))
    )
    next_cursor = str(page[-1].id) if len(found) == limit or len(page) < len(found) else None
    return json_answer({"jobs": [job_body(j) for j in page], "next_cursor": next_cursor})
