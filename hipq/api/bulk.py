"""/v1/jobs/bulk: an operator's verb on every job a filter matches.

POST with ``dry_run`` answers how many jobs match now. Otherwise it records a bulk
operation and answers 202 with it; the operation goes on in the background in bounded
steps (``hipq.process.bulk_runner``), and GET /v1/jobs/bulk/{id} shows its progress (counts and
state) from any process.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response

from hipq.api.auth import require
from hipq.api.json_body import JSONBodyRoute
from hipq.api.models import (
    ASCII_DIGITS,
    MAX_ID,
    BulkCountOut,
    BulkIn,
    BulkListOut,
    BulkOut,
    ErrorOut,
)
from hipq.ingest.job_intake import IntakeError
from hipq.service import Service
from hipq.storable_text import NUL_MESSAGE, nul_field
from hipq.store.bulk import BulkFilter, BulkOperation

router = APIRouter(prefix="/v1/jobs/bulk", tags=["bulk operations"], route_class=JSONBodyRoute)

# The errors every route shares (422, 413, 503, ...) are declared by hipq.api.contract.
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "no such bulk operation"},
}
# What each action takes besides the filter.
_PARAMS = {
    "cancel": {"reason"},
    "fail": {"reason"},
    "complete": {"result"},
    "retry": {"run_at", "run_in"},
    "reschedule": {"run_at", "run_in", "priority", "reset_attempts", "max_attempts"},
    "delete": set(),
}
BulkId = Annotated[int, Path(ge=1, le=MAX_ID, description="the bulk operation's id"), ASCII_DIGITS]


def _service(request: Request) -> Service:
    return request.app.state.service


def _out(op: BulkOperation) -> BulkOut:
    return BulkOut(
        id=op.id,
        action=op.action,
        filter=op.filter,
        params=op.params,
        state=op.state,  # type: ignore[arg-type]
        matched=op.matched,
        changed=op.changed,
        requested=op.requested,
        skipped=op.skipped,
        error=op.error,
        created_at=op.created_at,
        updated_at=op.updated_at,
        finished_at=op.finished_at,
    )


def _filter(body: BulkIn) -> BulkFilter:
    f = body.filter
    for name, value in f.model_dump().items():
        where = nul_field(value, f"filter.{name}")
        if where:
            raise IntakeError(where, NUL_MESSAGE)
    flt = BulkFilter(
        queue=f.queue,
        states=tuple(f.states),
        type=f.type,
        labels=f.labels,
        ids=tuple(f.ids),
        job_key=f.job_key,
        created_after=f.created_after,
        created_before=f.created_before,
        finished_after=f.finished_after,
        finished_before=f.finished_before,
        error_contains=f.error_contains,
    )
    if not flt.to_json():
        raise IntakeError(
            "filter", "give at least one condition (an empty filter matches every job)"
        )
    return flt


def _params(body: BulkIn, service: Service) -> dict[str, Any]:
    given = {k for k in body.model_fields_set if k not in ("action", "filter", "dry_run")}
    extra = sorted(given - _PARAMS[body.action])
    if extra:
        raise IntakeError(extra[0], f"not a parameter of {body.action}")
    if body.action == "fail" and not body.reason:
        raise IntakeError("reason", "fail needs a reason")
    if nul_field(body.reason, "reason") or nul_field(body.result, "result"):
        raise IntakeError("reason" if nul_field(body.reason, "reason") else "result", NUL_MESSAGE)
    params: dict[str, Any] = {}
    if body.reason is not None:
        params["reason"] = body.reason
    if body.action == "complete":
        params["result"] = body.result
    if body.run_at is not None or body.run_in is not None:
        at = service.intake.run_at(body.run_at, body.run_in, service.clock())
        params["run_at"] = at.isoformat()
    for name in ("priority", "max_attempts"):
        if getattr(body, name) is not None:
            params[name] = getattr(body, name)
    if body.reset_attempts:
        params["reset_attempts"] = True
    return params


@router.post(
    "",
    dependencies=[Depends(require("operate"))],
    status_code=202,
    response_model=BulkOut | BulkCountOut,
    responses={200: {"model": BulkCountOut, "description": "a dry run's count"}},
    summary="Cancel, retry, reschedule, complete, fail or delete every job a filter matches",
)
async def create_bulk(body: BulkIn, request: Request, response: Response) -> BulkOut | BulkCountOut:
    service = _service(request)
    flt = _filter(body)
    params = _params(body, service)
    if body.dry_run:
        response.status_code = 200
        return BulkCountOut(matched=await service.store.bulk_count(flt))
    op = await service.store.bulk_create(body.action, flt, params, service.clock())
    service.bulk.wake.set()
    response.headers["Location"] = f"/v1/jobs/bulk/{op.id}"
    return _out(op)


@router.get(
    "",
    dependencies=[Depends(require("read"))],
    response_model=BulkListOut,
    summary="The latest bulk operations, newest first",
)
async def list_bulk(request: Request) -> BulkListOut:
    return BulkListOut(operations=[_out(op) for op in await _service(request).store.bulk_list()])


@router.get(
    "/{bulk_id}",
    dependencies=[Depends(require("read"))],
    response_model=BulkOut,
    responses=_ERRORS,
    summary="A bulk operation and its progress",
)
async def get_bulk(bulk_id: BulkId, request: Request) -> BulkOut:
    return _out(await _service(request).store.bulk_get(bulk_id))
