"""The FastAPI application around a ``Service`` (OpenAPI at /docs)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from hipq import dashboard
from hipq.api import (
    auth,
    batches,
    bulk,
    callbacks,
    contract,
    errors,
    jobs,
    notifications,
    processes,
    queues,
    responses,
    schedules,
    workers,
)
from hipq.api.connection_limits import REFUSING
from hipq.api.long_polls import LongPolls
from hipq.api.models import ReadyOut
from hipq.api.request_guards import RequestGuards
from hipq.faults import FaultReporter, disk_full, unavailable
from hipq.observability.metrics import Metrics
from hipq.security.tokens import Tokens, load_tokens
from hipq.service import Service
from hipq.store.dialects import time_budget
from hipq.version import __version__

log = logging.getLogger("hipq.api")

# /readyz's check of the database is bounded: a blackholed database answers 503 in
# this time instead of holding the probe.
READY_CHECK_SECONDS = 2.0
# A full disk seen by a request this recently keeps /readyz at 503: the check's
# rolled-back write gets through a full disk, a job does not. (Other faults, such as
# an unreachable database, the check itself sees.)
READY_AFTER_FAULT_SECONDS = 5.0

DESCRIPTION = """Durable, throttled jobs against external systems.

Errors are JSON: `{"error": code, "field": ..., "message": ..., "errors": [...]}`.
A 503 (`database_unavailable`, `starting`) carries `Retry-After` and stored nothing.

Once tokens are configured, each route under /v1 needs a bearer token with the scope its
description names (401 without a valid token, 403 without the scope); `/healthz` and
`/readyz` stay open. Without tokens (on loopback only) hipq is open.
"""


class RequestBudget:
    """Each request's database work bounded by ``api_db_timeout`` (then a 503), and
    the API refused with 503 until the service has started (the database may still
    be on its way, its schema not yet checked)."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app, self.service = app, service
        self.seconds = service.settings.api_db_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.service.started and scope["path"].startswith("/v1/"):
            await errors.unavailable_response("hipq is starting: waiting for the database")(
                scope, receive, send
            )
            return
        with time_budget(self.seconds):
            await self.app(scope, receive, send)


def create_app(
    service: Service, *, manage_service: bool = True, tokens: Tokens | None = None
) -> FastAPI:
    """The API; with ``manage_service`` the app's lifespan starts and stops ``service``.
    ``tokens``: who may call it (default: those of ``HIPQ_TOKENS`` and ``auth.tokens_file``)."""
    if tokens is None:
        tokens = load_tokens(service.settings.auth.tokens_file)
        tokens.check_restrictions(
            service.settings.queues,
            service.settings.job_types,
            service.settings.notifications.targets,
        )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if manage_service:
            await service.start()
        try:
            yield
        finally:
            if manage_service:
                await service.stop()

    # /docs comes from the dashboard, its assets served from the wheel (no CDN).
    app = FastAPI(
        title="hipq",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        generate_unique_id_function=contract.operation_id,
    )
    app.state.service = service
    app.state.metrics = Metrics(service.events, service.settings)
    faults = FaultReporter(log, "API")
    app.state.database_faults = faults
    app.state.long_polls = LongPolls(service.settings.server.max_waits_per_token)
    app.state.pull_reports = workers.PullReportWriter(service)
    errors.install(app, faults)
    auth.install(app)
    app.add_middleware(errors.BodyLimit, max_bytes=service.settings.server.max_body_bytes)
    app.add_middleware(errors.FaultRecovery, faults=faults)
    app.add_middleware(RequestBudget, service=service)
    # A foreign Host or Origin, a non-JSON or stalled body: refused before any route.
    app.add_middleware(RequestGuards, server=service.settings.server)
    # Outermost: a caller without the scope is refused before anything reads the body.
    app.add_middleware(auth.Authentication, api=app, tokens=tokens, settings=service.settings)

    # The probes and /metrics first: a request is matched against the routes in order,
    # and each included router costs a scan of its routes (a probe behind them all paid
    # for about fifty).
    @app.get("/healthz", tags=["ops"], summary="The process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["ops"],
        summary="Ready to serve: a job can be accepted now",
        response_model=ReadyOut,
        responses={503: {"model": ReadyOut, "description": "Not ready: `problems` says why"}},
    )
    async def readyz(request: Request) -> JSONResponse:
        problems: dict[str, str] = {}
        if not service.started:
            problems["service"] = "not started"
        try:
            await service.store.write_check(READY_CHECK_SECONDS)
        except Exception as exc:
            cause = unavailable(exc) or f"{type(exc).__name__}: {exc}"
            problems["database"] = f"cannot accept a job now ({cause})"
        else:
            failing = faults.database_failed_within(READY_AFTER_FAULT_SECONDS)
            if failing is not None and disk_full(failing):
                problems["database"] = f"requests are failing ({failing})"
        refusing = request.scope.get(REFUSING)
        if refusing is not None:
            problems["connections"] = refusing
        status = service.status()
        principal = auth.principal_of(request)
        if principal is None or not principal.reads_all:
            # The host name and pid, and the config's queue names: only for a caller
            # with read (the probe of a load balancer has no token).
            del status["owner"], status["queues_owned"]
        if status["listener"] is False:
            problems["listen"] = (
                "PostgreSQL LISTEN connection is down (wake-ups fall back to ticks)"
            )
        if status["kafka_producer"] is False:
            problems["kafka_producer"] = "not connected to the Kafka broker (reconnecting)"
        if status["kafka_consumer"] is False:
            problems["kafka_consumer"] = "not consuming response topics (reconnecting)"
        body = {"status": "ready" if not problems else "not ready", "problems": problems, **status}
        return JSONResponse(body, 200 if not problems else 503)

    metrics_scope = [] if service.settings.auth.metrics_open else [Depends(auth.require("read"))]

    @app.get(
        "/metrics",
        tags=["ops"],
        summary="Prometheus metrics",
        dependencies=metrics_scope,
        response_class=Response,
        responses={
            200: {
                "description": "The Prometheus text exposition format",
                "content": {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": {"type": "string"}}},
            }
        },
    )
    async def metrics() -> Response:
        return Response(generate_latest(app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    app.include_router(jobs.creating)  # see there
    app.include_router(bulk.router)  # before jobs: /v1/jobs/bulk is not a job id
    app.include_router(jobs.router)
    app.include_router(batches.router)
    app.include_router(notifications.router)
    app.include_router(queues.router)
    app.include_router(processes.router)
    app.include_router(callbacks.router)
    app.include_router(responses.router)
    app.include_router(schedules.router)
    app.include_router(workers.router)
    dashboard.install(app, tokens)
    auth.solved_by_middleware(app)  # every route is in: the middleware checks the scopes

    # Outermost of all (the dashboard's middleware included): see UnexpectedErrors.
    app.add_middleware(errors.UnexpectedErrors)
    auth.document(app)
    contract.document(app)  # last: it completes what the routes and auth declared
    return app
