"""POST /v1/callbacks/{key}: an external system's answer, stored before it is acknowledged."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from hipq.api.auth import CallbackAccess, token_proves_callback
from hipq.api.errors import InvalidParameter, error_body
from hipq.api.json_body import loads, off_loop
from hipq.api.models import ErrorOut
from hipq.ingest.outcome_rules import ANY_RESPONSE
from hipq.ingest.response_intake import WEBHOOK_ID, check_body, check_callback_key, new_response
from hipq.job_types import JobTypeInfo, JobTypes
from hipq.security.signatures import SignatureError, verify
from hipq.service import Service

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
    status: str = Field(
        default="accepted",
        description="accepted (stored now), or duplicate (a replayed signed message, "
        "stored before under response_id)",
    )
    response_id: int = Field(description="the stored response (see GET /v1/responses/{id})")


def _only_signed(job_types: JobTypes) -> bool:
    """Every job type that takes callbacks requires signatures: an unsigned callback
    could never settle anything, so it is refused instead of kept for the TTL."""
    external = [t for t in job_types.values() if t.external]
    return bool(external) and all(t.signed for t in external)


def _unauthorized(reason: str) -> JSONResponse:
    return JSONResponse(error_body("unauthorized", [("webhook-signature", reason)]), 401)


# A heartbeat's progress: a small JSON value, shown on the job; larger is refused.
PROGRESS_MAX_BYTES = 4096


class HeartbeatAccepted(BaseModel):
    status: str = Field(default="accepted", description="accepted: stored now")
    attempt: int = Field(description="the attempt of the job it was counted for")
    deadline: datetime = Field(
        description="the attempt's deadline once the queue's loop takes the heartbeat "
        "(within a few seconds): send the next heartbeat before it"
    )


def _signature_refusal(
    info: JobTypeInfo, request: Request, raw: bytes, service: Service
) -> JSONResponse | None:
    """A 401 unless the request carries what the job type's callbacks must carry."""
    signature = info.config.callback_signature
    if signature is None or token_proves_callback(request, info.config.callback_accepts):
        return None
    try:
        verify(
            signature.secret,
            request.headers,
            raw,
            service.clock().timestamp(),
            int(signature.tolerance),
        )
    except SignatureError as exc:
        return _unauthorized(exc.reason)
    return None


def _progress(raw: bytes) -> tuple[bool, Any]:
    """(given, progress) from a heartbeat's body: empty, or ``{"progress": <JSON>}``."""
    if not raw.strip():
        return False, None
    if len(raw) > PROGRESS_MAX_BYTES:
        raise InvalidParameter("progress", f"the body is over {PROGRESS_MAX_BYTES} bytes")
    try:
        body = loads(raw, "body")
    except json.JSONDecodeError as exc:
        raise InvalidParameter("body", f"not JSON: {exc.msg}") from None
    if not isinstance(body, dict) or set(body) - {"progress"}:
        raise InvalidParameter("body", 'a heartbeat\'s body is empty or {"progress": <JSON>}')
    check_body(body, "progress")
    return "progress" in body, body.get("progress")


# Declared before the callback route: its `{key:path}` would take `.../heartbeat` too.
@router.post(
    "/v1/callbacks/{key:path}/heartbeat",
    dependencies=[Depends(CallbackAccess())],
    status_code=202,
    response_model=HeartbeatAccepted,
    responses={
        401: {"model": ErrorOut},
        404: {"model": ErrorOut},
        409: {"model": ErrorOut},
        422: {"model": ErrorOut},
    },
    summary="An external system says it is still working on a job (and how far it got)",
    description=(
        "For job types with a `heartbeat_timeout`: the attempt's deadline becomes now plus "
        "that timeout (taken by the queue's loop within a few seconds), so a job that needs "
        "hours stays alive while its system heartbeats, and fails its attempt (for its retry "
        'strategy) when they stop. The body is empty or `{"progress": <JSON>}` of at most '
        f"{PROGRESS_MAX_BYTES} bytes, shown as `heartbeat.progress` on GET /v1/jobs/{{id}}; "
        "without it the last progress stays. `?type=` is required, and the request is "
        "authenticated exactly as the callback of that type (a Standard Webhooks signature "
        "over this body, or a token with the callbacks scope): else 401. No job of that type "
        "in flight with the key: 404 (one that is scheduled: 409)."
    ),
)
async def deliver_heartbeat(
    key: str,
    request: Request,
    type: Annotated[str, Query(description="the job type (hipq adds it to the callback URL)")],
) -> Any:
    service: Service = request.app.state.service
    raw = await request.body()
    info = service.job_types.lookup(type)
    if info is None:
        raise InvalidParameter("type", f"unknown job type {type!r}")
    refusal = _signature_refusal(info, request, raw, service)
    if refusal is not None:
        return refusal
    timeout = info.config.heartbeat_timeout
    if timeout is None:
        raise InvalidParameter(
            "type", f"job type {type!r} takes no heartbeats (it has no heartbeat_timeout)"
        )
    check_callback_key(key)
    given, progress = _progress(raw)
    beat = await service.store.heartbeat_record(
        key, info.name, progress, service.clock(), timeout, keep_progress=not given
    )
    return HeartbeatAccepted(attempt=beat.attempt, deadline=beat.deadline)


@router.post(
    "/v1/callbacks/{key:path}",
    dependencies=[Depends(CallbackAccess())],
    status_code=202,
    response_model=CallbackAccepted,
    responses={
        200: {"model": CallbackAccepted, "description": "a replay, answered without storing it"},
        401: {"model": ErrorOut},
        413: {"model": ErrorOut},
        422: {"model": ErrorOut},
    },
    summary="Deliver the correlated response of a job (stored durably before the 202)",
    description=(
        "hipq puts this URL, with the job's correlation key and `?type=`, in each request it "
        "sends. Answers 202 once the response is stored, also for a duplicate or an unknown key "
        "(kept until the TTL, see GET /v1/responses). With `?type=` naming a job type that "
        "requires signatures, a bad or missing Standard Webhooks signature is a 401 before any "
        "lookup; a replay of a signed message (same `webhook-id` within the tolerance) is a 200 "
        "with status `duplicate`, not stored again. When every job type that takes callbacks "
        "requires signatures, a callback without such a `?type=` is a 401. A key over 500 "
        "characters, or a key or JSON body holding \\u0000 (which PostgreSQL cannot store), "
        "is a 422."
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
    replay_seed: str | None = None
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
                return _unauthorized(exc.reason)
            replay_seed = request.headers[WEBHOOK_ID]
    if replay_seed is None and _only_signed(service.job_types):
        return _unauthorized(
            "every job type here requires signed callbacks: add ?type= naming one and a "
            "Standard Webhooks signature"
        )
    check_callback_key(key)
    body = await off_loop(len(raw), lambda: _parsed_body(raw))
    headers = {k: v for k, v in request.headers.items() if k not in _DROPPED_HEADERS}
    rule = ANY_RESPONSE if info is None else info.outcome_rule
    response = new_response(
        key, body, source="webhook", rule=rule, headers=headers, kept_headers=headers, job_type=type
    )
    if replay_seed is not None and info is not None and info.config.callback_signature:
        # Standard Webhooks: remember message ids for the tolerance window, so that a
        # captured request replayed within it is not stored (and counted) again.
        # Older replays already fail the timestamp check.
        window = timedelta(seconds=int(info.config.callback_signature.tolerance))
        seen = await service.store.response_delivered(
            key, info.name, response.fingerprint or "", service.clock() - window
        )
        if seen is not None:
            return JSONResponse(CallbackAccepted(status="duplicate", response_id=seen).model_dump())
    response_id = await service.responses.write(response)
    return CallbackAccepted(response_id=response_id)
