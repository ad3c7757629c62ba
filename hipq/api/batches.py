"""/v1/batches: a batch of jobs (made by a batch POST with ``batch``), its counts."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request

from hipq.api.auth import require
from hipq.api.json_body import JSONBodyRoute
from hipq.api.models import MAX_ID, BatchIn, BatchOut, ErrorOut
from hipq.batches import Batch, NewBatch
from hipq.ingest.job_intake import Intake, IntakeError
from hipq.service import Service

router = APIRouter(prefix="/v1/batches", tags=["batches"], route_class=JSONBodyRoute)
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "no such batch"}
}
BatchId = Annotated[int, Path(ge=1, le=MAX_ID, description="the batch's id")]


def new_batch(intake: Intake, batch: BatchIn | None, now: datetime) -> NewBatch | None:
    """The batch a batch POST asks for, its completion job resolved (errors name
    ``batch.on_complete.<field>``)."""
    if batch is None:
        return None
    if batch.on_complete is None:
        if batch.notify:
            raise IntakeError("batch.notify", "needs batch.on_complete (the job told of)")
        return NewBatch()
    fields = batch.on_complete.model_dump(exclude_unset=True, exclude_none=True)
    if batch.notify is not None:
        fields["notify"] = batch.notify
    try:
        completion = intake.resolve(fields, now)
    except IntakeError as exc:
        where = "batch." if exc.field.startswith("notify") else "batch.on_complete."
        raise IntakeError(where + exc.field, exc.message) from None
    return NewBatch(completion)


def batch_out(batch: Batch) -> BatchOut:
    return BatchOut(**asdict(batch), pending=batch.pending)


@router.get(
    "/{batch_id}",
    dependencies=[Depends(require("read"))],
    response_model=BatchOut,
    responses=_ERRORS,
    summary="A batch's counts: pending, completed, failed, cancelled",
)
async def get_batch(batch_id: BatchId, request: Request) -> BatchOut:
    service: Service = request.app.state.service
    return batch_out(await service.store.batch_get(batch_id))
