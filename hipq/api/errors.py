"""Every error the API answers is JSON naming the field and the problem; never a bare 500."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hipq.faults import FaultReporter
from hipq.ingest.job_intake import CallerRefused, IntakeError
from hipq.ingest.response_intake import ResponseRefused
from hipq.store import BadReference, Conflict, NotFound, StoreError

log = logging.getLogger("hipq.api")


class InvalidParameter(ValueError):
    """A request parameter the route refuses; answered as a 422 naming it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


# What a client is told to wait before it retries a request the database could not serve.
RETRY_AFTER_SECONDS = 2

# The errors a database fault arrives as (``hipq.faults.unavailable`` tells which of
# them are one): the store's driver wrapped by SQLAlchemy, or the drivers' own.
DATABASE_ERRORS: tuple[type[Exception], ...] = (
    sa_exc.DBAPIError,
    sa_exc.TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    sqlite3.Error,
    OSError,
)


def unavailable_response(message: str) -> JSONResponse:
    """503 with Retry-After: nothing was stored, the same request may be sent again."""
    return JSONResponse(
        error_body("database_unavailable", [(None, message)]),
        503,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


# Answered without the database: their success says nothing of it (a liveness probe
# every few seconds ended each outage's fault and the next request began a new one).
_WITHOUT_DATABASE = ("/healthz", "/metrics", "/openapi.json", "/docs", "/dashboard/static/")


class FaultRecovery:
    """Ends the API's database fault (one log line) at the first successful answer of a
    route that used the database (not a probe, not a refusal)."""

    def __init__(self, app: ASGIApp, faults: FaultReporter) -> None:
        self.app, self.faults = app, faults

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not self.faults.active
            or scope["path"].startswith(_WITHOUT_DATABASE)
        ):
            await self.app(scope, receive, send)
            return

        async def watching_send(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                self.faults.succeeded()
            await send(message)

        await self.app(scope, receive, watching_send)


# The HTTP answer to each of the store's errors; chosen here, as every HTTP code is.
_STORE_ERRORS: dict[type[StoreError], tuple[str, int]] = {
    NotFound: ("not_found", 404),
    Conflict: ("conflict", 409),
    BadReference: ("invalid_request", 422),
}


def error_body(code: str, items: Sequence[tuple[str | None, str]]) -> dict[str, Any]:
    field, message = items[0]
    return {
        "error": code,
        "field": field,
        "message": f"{field}: {message}" if field else message,
        "errors": [{"field": f, "message": m} for f, m in items],
    }


async def send_error(send: Send, status: int, code: str, field: str | None, message: str) -> None:
    """An error in hipq's JSON shape, sent by a middleware below FastAPI (no Response)."""
    body = orjson.dumps(error_body(code, [(field, message)]))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _field(loc: Sequence[Any]) -> str | None:
    parts = [p for p in loc if p not in ("body", "query", "path", "header")]
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def _message(err: dict[str, Any]) -> str:
    if err["type"] == "json_invalid":
        return f"body is not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})"
    if tuple(err["loc"]) == ("body",):  # the body as a whole
        if err["type"] == "missing":
            return "a JSON object is required as the request body"
        if isinstance(err.get("input"), bytes):  # not parsed: the content-type is not JSON
            return "the request body must be JSON, sent with content-type: application/json"
        return "the request body must be a JSON object"
    if err["type"] == "missing":
        return "field required"
    if err["type"] == "extra_forbidden":
        return "unknown field"
    return str(err["msg"]).removeprefix("Value error, ")


class StrictJSONRequest(Request):
    """Request bodies decoded by orjson: NaN, Infinity and overflowing numbers are refused."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = orjson.loads(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    def get_route_handler(self):  # type: ignore[no-untyped-def]
        handler = super().get_route_handler()

        async def strict_handler(request: Request):  # type: ignore[no-untyped-def]
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler


class BodyLimit:
    """413 for bodies over the limit, before they are read whole (by header or by count)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for name, value in scope.get("headers") or ():
            if name == b"content-length":
                declared = value  # the last, as a dict of the headers would keep
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge(self.max_bytes)
            return message

        try:
            await self.app(scope, counted, send)
        except _TooLarge:
            if not response_started(scope):
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        message = f"request body exceeds {self.max_bytes} bytes"
        await send_error(send, 413, "body_too_large", None, message)


class _TooLarge(HTTPException):
    # An HTTPException: FastAPI turns any other error raised while it reads the body
    # into a 400, but lets this one through to the 413 answer.
    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"request body exceeds {max_bytes} bytes")


def install(app: FastAPI, faults: FaultReporter) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_r: Request, exc: RequestValidationError) -> JSONResponse:
        items = [
            (None if e["type"] == "json_invalid" else _field(e["loc"]), _message(e))
            for e in exc.errors()
        ]
        return JSONResponse(error_body("invalid_request", items or [(None, "invalid")]), 422)

    # A job, a change, a response or a parameter refused by its rules: 422 naming the field.
    async def _invalid_field(_r: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, IntakeError | ResponseRefused | InvalidParameter)
        return JSONResponse(error_body("invalid_request", [(exc.field, exc.message)]), 422)

    for refused in (IntakeError, ResponseRefused, InvalidParameter):
        app.add_exception_handler(refused, _invalid_field)

    # A job its caller's token does not allow: 403 naming the field.
    @app.exception_handler(CallerRefused)
    async def _caller_refused(_r: Request, exc: CallerRefused) -> JSONResponse:
        return JSONResponse(error_body("forbidden", [(exc.field, exc.message)]), 403)

    @app.exception_handler(StoreError)
    async def _store(_r: Request, exc: StoreError) -> JSONResponse:
        code, status = _STORE_ERRORS.get(type(exc), ("conflict", 409))
        return JSONResponse(error_body(code, [(exc.field, exc.message)]), status)

    # Handled here, not by the catch-all below: the server logs a second traceback of
    # whatever reaches that one, and a database outage fails every request.
    async def _database(_r: Request, exc: Exception) -> JSONResponse:
        if faults.failed(exc) is None:
            return JSONResponse(
                error_body("internal_error", [(None, "internal error; see the log")]), 500
            )
        return unavailable_response(
            "the database is unavailable or busy; nothing was stored, retry later"
        )

    for error in DATABASE_ERRORS:
        app.add_exception_handler(error, _database)

    @app.exception_handler(HTTPException)
    async def _http(_r: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(
            exc.status_code, "http_error"
        )
        return JSONResponse(error_body(code, [(None, str(exc.detail))]), exc.status_code)

    # Anything else: ``UnexpectedErrors``, not a handler for Exception (which Starlette
    # calls, then re-raises to the server: a second traceback and a closed connection).


# Set in a request's scope when its response starts, by ``UnexpectedErrors``, the
# outermost middleware: the others read it instead of each wrapping ``send`` again.
_STARTED = "hipq.response_started"


def response_started(scope: Scope) -> bool:
    """Whether this request's response has started: too late for an error answer."""
    return _STARTED in scope


class UnexpectedErrors:
    """The last net, outermost: an error nothing answered is logged once and answered
    500 (JSON) on a connection that stays open; a client that went away while its body
    was read is one short line (nobody is left to answer)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def tracking_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                scope[_STARTED] = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except ClientDisconnect:
            log.info(
                "%s %s: the client closed the connection before its request was read",
                scope["method"],
                scope["path"],
            )
        except Exception:
            log.exception("unexpected error: %s %s", scope["method"], scope["path"])
            if not response_started(scope):
                await send_error(send, 500, "internal_error", None, "internal error; see the log")
