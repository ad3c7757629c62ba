"""/v1/responses: the responses inbox (unmatched, duplicate, late) and parked messages."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, Field

from hipq.api.auth import require
from hipq.api.errors import InvalidParameter
from hipq.api.json_body import JSONBodyRoute
from hipq.api.models import ASCII_DIGITS, MAX_ID, ErrorOut
from hipq.api.paging import Cursor, json_size, within_budget
from hipq.ingest.response_intake import shown_headers
from hipq.service import Service
from hipq.storable_text import NUL_MESSAGE
from hipq.store import Conflict, Response

router = APIRouter(prefix="/v1/responses", tags=["responses"], route_class=JSONBodyRoute)
Status = Literal["pending", "matched", "duplicate", "late", "expired"]
_UNMATCHED = ("pending", "late", "expired")


class ResponseOut(BaseModel):
    id: int = Field(description="the response's id")
    correlation_key: str = Field(description="the key it carried")
    source: str = Field(description="webhook (a callback), or kafka:<topic>")
    received_at: datetime = Field(description="when it was received")
    expires_at: datetime = Field(description="an unmatched response is kept until then")
    succeeded: bool = Field(description="whether the job type's outcome rule read a success")
    reason: str | None = Field(description="the outcome rule's reason for a failure")
    body: Any = Field(description="its body: JSON, or text")
    headers: dict[str, str] | None = Field(
        description="its headers, credentials and signature headers (webhook-*) left out"
    )
    job_type: str | None = Field(description="the job type it named (?type=)")
    status: str = Field(
        description="pending (early or unknown key), matched, duplicate, late, expired"
    )
    job_id: int | None = Field(description="the job it settled")
    forced_job_id: int | None = Field(description="set when an operator matched it by hand")
    settled_at: datetime | None = Field(description="when it settled its job")

    @classmethod
    def of(cls, r: Response) -> ResponseOut:
        fields = {name: getattr(r, name) for name in cls.model_fields}
        # Rows stored before the signature headers were dropped at intake.
        fields["headers"] = shown_headers(r.headers)
        return cls(**fields)


class ResponseListOut(BaseModel):
    responses: list[ResponseOut] = Field(description="a page of responses, newest first")
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page")


class MatchIn(BaseModel):
    job_id: int = Field(
        ge=1, le=MAX_ID, description="a running or awaiting job this response settles"
    )
    accept_unsigned: bool = Field(
        default=False,
        description=(
            "settle a job whose type requires signed callbacks with a response that was not "
            "signed for that type (refused with 409 unless true)"
        ),
    )


ResponseId = Annotated[int, Path(ge=1, le=MAX_ID, description="the response's id"), ASCII_DIGITS]


class ParkedOut(BaseModel):
    id: int = Field(description="the parked message's id")
    source: str = Field(description="kafka:<topic> it came from")
    partition: int | None = Field(description="its partition")
    offset: int | None = Field(description="its offset in the partition")
    reason: str = Field(description="why it could not become a response")
    key: str | None = Field(description="its key, as text")
    value: str | None = Field(description="its value, as text")
    received_at: datetime = Field(description="when it was consumed")


@router.get(
    "",
    dependencies=[Depends(require("read"))],
    response_model=ResponseListOut,
    summary="List inbox responses, newest first",
)
async def list_responses(
    request: Request,
    status: Annotated[list[Status] | None, Query(description="repeat for several")] = None,
    matched: Annotated[bool | None, Query(description="false: pending, late and expired")] = None,
    key: Annotated[str | None, Query(description="correlation key")] = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="responses per page at most")] = 100,
    after: Cursor = None,
) -> ResponseListOut:
    if key is not None and "\x00" in key:
        raise InvalidParameter("key", NUL_MESSAGE)  # PostgreSQL cannot compare it
    service: Service = request.app.state.service
    statuses: tuple[str, ...] = tuple(status or ())
    if matched is True:
        statuses = ("matched",)
    elif matched is False:
        statuses = _UNMATCHED
    found = await service.store.response_list(statuses, key, after, limit)
    page = within_budget(found, lambda r: json_size(r.body, r.headers))
    return ResponseListOut(
        responses=[ResponseOut.of(r) for r in page],
        next_cursor=str(page[-1].id) if len(found) == limit or len(page) < len(found) else None,
    )


@router.get(
    "/parked",
    dependencies=[Depends(require("read"))],
    response_model=list[ParkedOut],
    summary="Kafka messages that could not become responses, with the reason",
)
async def list_parked(
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000, description="messages per page at most")] = 100,
    after: Cursor = None,
) -> list[ParkedOut]:
    service: Service = request.app.state.service
    return [ParkedOut(**p) for p in await service.store.parked_list(after, limit)]


@router.get(
    "/{response_id}",
    dependencies=[Depends(require("read"))],
    response_model=ResponseOut,
    responses={404: {"model": ErrorOut}},
    summary="One response of the inbox",
)
async def get_response(response_id: ResponseId, request: Request) -> ResponseOut:
    service: Service = request.app.state.service
    return ResponseOut.of(await service.store.response_get(response_id))


@router.post(
    "/{response_id}/match",
    dependencies=[Depends(require("operate"))],
    response_model=ResponseOut,
    responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut}},
    summary="Match a response to an in-flight job by hand (settled at the next tick)",
    description=(
        "A job whose type requires signed callbacks is matched only with a response signed "
        "for that type, unless `accept_unsigned` is true (409 naming `accept_unsigned`)."
    ),
)
async def match_response(response_id: ResponseId, body: MatchIn, request: Request) -> ResponseOut:
    service: Service = request.app.state.service
    if not service.job_types.any_external:
        # No queue's loop matches responses when every job type runs in process: the
        # match would be recorded and never settle anything.
        raise Conflict(
            "no job type here takes responses (all run python handlers); to finish a job "
            "by hand use POST /v1/jobs/{id}/complete or /fail",
            field="job_id",
        )
    response = await service.store.response_force_match(
        response_id,
        body.job_id,
        service.clock(),
        signed_types=service.job_types.signed_types(),
        accept_unsigned=body.accept_unsigned,
    )
    return ResponseOut.of(response)
