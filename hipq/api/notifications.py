"""Outcome notifications as the API shows them: a job's, and every one by status."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, Field

from hipq.api.auth import require
from hipq.api.json_body import JSONBodyRoute
from hipq.api.models import ASCII_DIGITS, MAX_ID, ErrorOut
from hipq.api.paging import Cursor, json_size, within_budget
from hipq.outbox import Notification
from hipq.service import Service

router = APIRouter(prefix="/v1", tags=["notifications"], route_class=JSONBodyRoute)
Status = Literal["pending", "failing", "sent"]
_ERRORS: dict[int | str, dict[str, Any]] = {404: {"model": ErrorOut}, 422: {"model": ErrorOut}}


class NotificationOut(BaseModel):
    id: int = Field(description="also the receiver's message id: webhook-id hipq-notification-<id>")
    job_id: int | None = Field(description="the job whose outcome it tells (null: a batch's)")
    batch_id: int | None = Field(None, description="the batch whose finish it tells")
    target: str = Field(description="the name of the target in notifications.targets")
    job_state: str = Field(
        description="the terminal state it tells: completed, failed, cancelled; a batch's: finished"
    )
    attempt: int = Field(description="the job's attempt that ended so (a batch's: 0)")
    status: str = Field(description="pending (not tried yet), failing (retried), sent")
    attempts: int = Field(description="tries so far")
    next_attempt_at: datetime = Field(description="when it is tried next, unless sent")
    last_error: str | None = Field(description="why the last try failed")
    created_at: datetime = Field(description="when the job reached the state")
    sent_at: datetime | None = Field(description="when the receiver accepted it")

    @classmethod
    def of(cls, n: Notification) -> NotificationOut:
        return cls(**{name: getattr(n, name) for name in cls.model_fields})


class NotificationListOut(BaseModel):
    notifications: list[NotificationOut] = Field(description="this page, newest first")
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="the job's id"), ASCII_DIGITS]


@router.get(
    "/jobs/{job_id}/notifications",
    dependencies=[Depends(require("read"))],
    response_model=list[NotificationOut],
    responses=_ERRORS,
    summary="A job's outcome notifications, oldest first",
)
async def job_notifications(job_id: JobId, request: Request) -> list[NotificationOut]:
    service: Service = request.app.state.service
    return [NotificationOut.of(n) for n in await service.store.notification_of_job(job_id)]


@router.get(
    "/notifications",
    dependencies=[Depends(require("read"))],
    response_model=NotificationListOut,
    responses=_ERRORS,
    summary="List outcome notifications, newest first",
)
async def list_notifications(
    request: Request,
    status: Annotated[Status | None, Query(description="only those in this status")] = None,
    job_id: Annotated[int | None, Query(ge=1, le=MAX_ID, description="only this job's")] = None,
    batch_id: Annotated[
        int | None, Query(ge=1, le=MAX_ID, description="only this batch's (its finish)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="notifications per page")] = 100,
    after: Cursor = None,
) -> NotificationListOut:
    service: Service = request.app.state.service
    found = await service.store.notification_list(job_id, status, after, limit, batch_id)
    page = within_budget(found, lambda n: json_size(n.result, n.error))
    return NotificationListOut(
        notifications=[NotificationOut.of(n) for n in page],
        next_cursor=str(page[-1].id) if len(found) == limit or len(page) < len(found) else None,
    )
