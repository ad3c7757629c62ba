"""POST /v1/callbacks/{key}: an external system's answer, stored before it is acknowledged."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from hipq.api.auth import CallbackAccess, token_proves_callback
from hipq.api.errors import InvalidParameter, error_body
from hipq.api.json_body import loads, off_loop
from hipq.api.models import ErrorOut
from hipq.job_types import JobTypeInfo
from hipq.outcome_rules import ANY_RESPONSE
from hipq.response_intake import check_body, check_callback_key, new_response
from hipq.service import Service
from hipq.signatures import SignatureError, verify

router = APIRouter(tags=["callbacks"])

# Headers kept with a stored response (never credentials).
_DROPPED_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization", "x-api-key"})


def _parsed_body(raw: bytes) -> Any:
    """The body as JSON (refused if it is JSON hipq refuses), or as text if it is not
    JSON; None when empty."""
    if not raw:
        return None
    try:
        body = loads(raw, "body")
    except json.JSONDecodeError:
        body = raw.decode("utf-8", errors="replace")
    check_body(body, "body")
    return body


class CallbackAccepted(BaseModel):
    status: str = "accepted"
    response_id: int


@router.post(
    "/v1/callbacks/{key:path}",
    dependencies=[Depends(CallbackAccess())],
    status_code=202,
    response_model=CallbackAccepted,
    responses={401: {"model": ErrorOut}, 413: {"model": ErrorOut}, 422: {"model": ErrorOut}},
    summary="Deliver the correlated response of a job (stored durably before the 202)",
    description=(
        "hipq puts this URL, with the job's correlation key and `?type=`, in each request it "
        "sends. Answers 202 once the response is stored, also for a duplicate or an unknown key "
        "(kept until the TTL, see GET /v1/responses). With `?type=` naming a job type that "
        "requires signatures, a bad or missing Standard Webhooks signature is a 401 before any "
        "lookup. A key over 500 characters, or a key or JSON body holding \\u0000 (which "
        "PostgreSQL cannot store), is a 422."
    ),
)
async def deliver_callback(
    key: str,
    request: Request,
    type: Annotated[str | None, Query(description="the job type (hipq adds it)")] = None,
) -> Any:
    service: Service = request.app.state.service
    raw = await request.body()
    info: JobTypeInfo | None = None
    if type is not None:
        info = service.job_types.lookup(type)
        if info is None:
            raise InvalidParameter("type", f"unknown job type {type!r}")
        signature = info.config.callback_signature
        if signature is not None and not token_proves_callback(
            request, info.config.callback_accepts
        ):
            try:
                verify(
                    signature.secret,
                    request.headers,
                    raw,
                    service.clock().timestamp(),
                    int(signature.tolerance),
                )
            except SignatureError as exc:
                return JSONResponse(
                    error_body("unauthorized", [("webhook-signature", exc.reason)]), 401
                )
    check_callback_key(key)
    body = await off_loop(len(raw), lambda: _parsed_body(raw))
    headers = {k: v for k, v in request.headers.items() if k not in _DROPPED_HEADERS}
    rule = ANY_RESPONSE if info is None else info.outcome_rule
    response = new_response(
        key, body, source="webhook", rule=rule, headers=headers, kept_headers=headers, job_type=type
    )
    response_id = await service.responses.write(response)
    return CallbackAccepted(response_id=response_id)
