"""POST /v1/callbacks/{key}: an external system's answer, stored before it is acknowledged."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from hipq.api.auth import CallbackAccess, token_proves_callback
from hipq.api.errors import InvalidParameter, error_body
from hipq.api.json_body import loads, off_loop
from hipq.api.models import ErrorOut
from hipq.ingest.response_intake import (
    WEBHOOK_ID,
    check_body,
    check_callback_key,
    fingerprint,
    new_response,
    shown_headers,
    signed_key_problem,
)
from hipq.job_types import PULL_KEY_PREFIX, JobTypeInfo, JobTypes
from hipq.outcome_rules import ANY_RESPONSE
from hipq.security.signatures import SignatureError, verify
from hipq.service import Service
from hipq.store import NotFound

router = APIRouter(tags=["callbacks"])

# Headers an outcome rule never sees (credentials); what is stored drops the signature
# headers too (``shown_headers``).
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
    # Pull types take their workers' reports through /v1/workers, never a callback.
    external = [t for t in job_types.values() if t.external and not t.pull]
    return bool(external) and all(t.signed for t in external)


# A heartbeat's progress: a small JSON value, shown on the job; larger is refused.
PROGRESS_MAX_BYTES = 4096


class HeartbeatAccepted(BaseModel):
    status: str = Field(
        default="accepted",
        description="accepted (stored now), or duplicate (a signed heartbeat taken before: "
        "nothing changed, and attempt and deadline are those of the last one)",
    )
    attempt: int = Field(description="the attempt of the job it was counted for")
    deadline: datetime = Field(
        description="the attempt's deadline once the queue's loop takes the heartbeat "
        "(within a few seconds): send the next heartbeat before it"
    )


class _Unauthorized(Exception):
    """A signed request that does not prove itself, or not for this job (a 401)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field, self.reason = field, reason

    def answer(self) -> JSONResponse:
        return JSONResponse(error_body("unauthorized", [(self.field, self.reason)]), 401)


def _signed_message(
    info: JobTypeInfo, request: Request, raw: bytes, service: Service
) -> str | None:
    """The ``webhook-id`` of a request the job type requires to be signed, once its
    signature verifies; None when it need not be (no secret, or a token stands in)."""
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
        raise _Unauthorized("webhook-signature", exc.reason) from None
    return request.headers[WEBHOOK_ID]


def _bind(info: JobTypeInfo, body: Any, key: str) -> None:
    """Refuse a signed message whose signed body does not name the URL's key: the URL
    is not signed, so the same message posted under another key must settle nothing."""
    if info.signed_key is None:  # not a signed type: _signed_message gave no message
        raise RuntimeError(f"job type {info.name!r} has no callback_signature.key")
    if problem := signed_key_problem(info.signed_key, body, key):
        raise _Unauthorized("key", problem)


# A signed message is taken by one route: a heartbeat replayed as the callback (whose
# body it may well satisfy) would complete the job, a callback replayed as a heartbeat
# would extend it.
_OTHER_ROUTE = "this signed message was delivered as {} already: send each message once"


def _replay_window(info: JobTypeInfo) -> timedelta:
    """How long a signed message of ``info`` may verify after it first arrived: its
    timestamp may be up to the tolerance ahead, and verifies until the tolerance after."""
    signature = info.config.callback_signature
    return timedelta(seconds=2 * int(signature.tolerance if signature else 0))


@dataclass(frozen=True, slots=True)
class _Beat:
    """What a heartbeat's body says: its progress (if it gives one), a checkpoint, and
    the body itself (a signed one's correlation key is read from it)."""

    given: bool = False
    progress: Any = None
    checkpoint: dict[str, Any] | None = None
    body: Any = None


_BEAT_FIELDS = frozenset({"progress", "checkpoint"})


def _beat(raw: bytes, signed: bool) -> _Beat:
    """A heartbeat's body: empty, or a JSON object whose ``progress`` and ``checkpoint``
    are read; other fields are refused (a misspelt ``progress`` would be lost), except
    in a ``signed`` type's body, which carries what its correlation key is built from.
    The body is bounded by ``server.max_body_bytes`` (a 413), as a job's payload is."""
    if not raw.strip():
        return _Beat()
    try:
        body = loads(raw, "body")
    except json.JSONDecodeError as exc:
        raise InvalidParameter("body", f"not JSON: {exc.msg}") from None
    if not isinstance(body, dict):
        raise InvalidParameter(
            "body", 'a heartbeat\'s body is empty or {"progress": <JSON>, "checkpoint": {...}}'
        )
    check_body(body, "body")
    if not signed and (unknown := sorted(body.keys() - _BEAT_FIELDS)):
        raise InvalidParameter(unknown[0], "unknown field (a heartbeat takes progress, checkpoint)")
    checkpoint = body.get("checkpoint")
    if "checkpoint" in body and not isinstance(checkpoint, dict):
        raise InvalidParameter("checkpoint", "a checkpoint is a JSON object (the new payload)")
    # Without a checkpoint the whole body is bounded as it always was.
    progress_size = (
        len(raw)
        if checkpoint is None
        else len(json.dumps(body.get("progress"), separators=(",", ":")).encode())
    )
    if progress_size > PROGRESS_MAX_BYTES:
        raise InvalidParameter("progress", f"the progress is over {PROGRESS_MAX_BYTES} bytes")
    return _Beat("progress" in body, body.get("progress"), checkpoint, body)


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
    summary="An external system says it is still working on a job (how far it got, and a "
    "checkpoint its retries start from)",
    description=(
        "For job types with a `heartbeat_timeout`: the attempt's deadline becomes now plus "
        "that timeout (taken by the queue's loop within a few seconds), so a job that needs "
        "hours stays alive while its system heartbeats, and fails its attempt (for its retry "
        'strategy) when they stop. The body is empty or a JSON object such as `{"progress": '
        f'<JSON>, "checkpoint": {{...}}}}`. Its `progress` (at most {PROGRESS_MAX_BYTES} bytes) '
        "is shown as `heartbeat.progress` on GET /v1/jobs/{id}, and without one the last "
        "progress stays. Its `checkpoint`, a JSON object, becomes the job's payload when the "
        "loop takes the heartbeat (for this attempt only, as a python handler's "
        "`checkpoint()`): a retry's request is built from it. A checkpoint that is not an "
        "object, or any body holding \\u0000, is a 422 naming the field; a body over "
        "`server.max_body_bytes` is a 413, as for a job's payload. "
        "`?type=` is required, and the request is authenticated exactly as the callback of "
        "that type (a Standard Webhooks signature over this body, or a token with the "
        "callbacks scope): else 401. A signed heartbeat is bound to its job as a signed "
        "callback is: its body carries the correlation key where the type's "
        "`callback_signature.key` says (else 401, field `key`), and its `webhook-id` is taken "
        "once per type (a replay is a 200 with status `duplicate` and changes nothing). No "
        "job of that type in flight with the key: 404 (one that is scheduled: 409)."
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
    try:
        message = _signed_message(info, request, raw, service)
    except _Unauthorized as exc:
        return exc.answer()
    timeout = info.config.heartbeat_timeout
    if timeout is None:
        raise InvalidParameter(
            "type", f"job type {type!r} takes no heartbeats (it has no heartbeat_timeout)"
        )
    check_callback_key(key)
    if info.pull or key.startswith(PULL_KEY_PREFIX):
        # A pull job takes its worker's heartbeats only (with its token): answered as
        # for a key no job has.
        raise NotFound(f"no open job of type {type!r} has correlation key {key!r}", field="key")
    beat_in = await off_loop(len(raw), lambda: _beat(raw, info.signed_key is not None))
    if message is not None:
        try:
            _bind(info, beat_in.body, key)
        except _Unauthorized as exc:
            return exc.answer()
        since = service.clock() - _replay_window(info)
        if await service.store.response_delivered(info.name, fingerprint(None, message), since):
            return _Unauthorized("webhook-id", _OTHER_ROUTE.format("a callback")).answer()
    beat, new = await service.store.heartbeat_record(
        key,
        info.name,
        beat_in.progress,
        service.clock(),
        timeout,
        keep_progress=not beat_in.given,
        message=None if message is None else fingerprint(None, message),
        checkpoint=beat_in.checkpoint,
    )
    if not new:
        replay = HeartbeatAccepted(status="duplicate", attempt=beat.attempt, deadline=beat.deadline)
        return JSONResponse(replay.model_dump(mode="json"), 200)
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
        "lookup, and so is a signed body that does not carry the URL's key where the type's "
        "`callback_signature.key` says (field `key`: the URL is not signed); a replay of a "
        "signed message (its `webhook-id` taken before for this type, whatever the key, within "
        "twice the tolerance) is a 200 with status `duplicate`, not stored again. The "
        "signature headers are not stored. When every job type that takes callbacks "
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
    message: str | None = None
    if type is not None:
        info = service.job_types.lookup(type)
        if info is None:
            raise InvalidParameter("type", f"unknown job type {type!r}")
        try:
            message = _signed_message(info, request, raw, service)
        except _Unauthorized as exc:
            return exc.answer()
    if message is None and _only_signed(service.job_types):
        return _Unauthorized(
            "webhook-signature",
            "every job type here requires signed callbacks: add ?type= naming one and a "
            "Standard Webhooks signature",
        ).answer()
    check_callback_key(key)
    body = await off_loop(len(raw), lambda: _parsed_body(raw))
    headers = {k: v for k, v in request.headers.items() if k not in _DROPPED_HEADERS}
    rule = ANY_RESPONSE if info is None else info.outcome_rule
    response = new_response(
        key,
        body,
        source="webhook",
        rule=rule,
        headers=headers,
        kept_headers=shown_headers(headers),
        job_type=type,
    )
    if message is not None and info is not None:
        try:
            _bind(info, body, key)
        except _Unauthorized as exc:
            return exc.answer()
        # Standard Webhooks: a message id is taken once per job type, whatever key the
        # URL names, while a signature that old still verifies; older ones fail the
        # timestamp check. The fingerprint of a signed response is its webhook-id's.
        seen = await service.store.response_delivered(
            info.name, response.fingerprint or "", service.clock() - _replay_window(info)
        )
        if seen is not None:
            return JSONResponse(CallbackAccepted(status="duplicate", response_id=seen).model_dump())
        since = service.clock() - _replay_window(info)
        if await service.store.heartbeat_message_taken(
            info.name, response.fingerprint or "", since
        ):
            return _Unauthorized("webhook-id", _OTHER_ROUTE.format("a heartbeat")).answer()
    response_id = await service.responses.write(response)
    return CallbackAccepted(response_id=response_id)
