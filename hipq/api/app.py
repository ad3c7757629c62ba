"""The FastAPI application around a ``Service`` (OpenAPI at /docs)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from hipq import __version__
from hipq.api import callbacks, errors, jobs, queues, responses
from hipq.metrics import Metrics
from hipq.service import Service

DESCRIPTION = """Durable, throttled jobs against external systems.

Errors are JSON: `{"error": code, "field": ..., "message": ..., "errors": [...]}`.
"""


def create_app(service: Service, *, manage_service: bool = True) -> FastAPI:
    """The API; with ``manage_service`` the app's lifespan starts and stops ``service``."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if manage_service:
            await service.start()
        try:
            yield
        finally:
            if manage_service:
                await service.stop()

    app = FastAPI(title="hipq", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    app.state.service = service
    app.state.metrics = Metrics(service.events)
    errors.install(app)
    app.add_middleware(errors.BodyLimit, max_bytes=service.settings.server.max_body_bytes)
    app.include_router(jobs.router)
    app.include_router(queues.router)
    app.include_router(callbacks.router)
    app.include_router(responses.router)

    @app.get("/healthz", tags=["ops"], summary="The process is alive")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], summary="Ready to serve: database reachable, loops running")
    async def readyz(request: Request) -> JSONResponse:
        problems: dict[str, str] = {}
        if not service.started:
            problems["service"] = "not started"
        try:
            await service.store.ping()
        except Exception as exc:
            problems["database"] = f"unreachable: {type(exc).__name__}"
        status = service.status()
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

    @app.get("/metrics", tags=["ops"], summary="Prometheus metrics")
    async def metrics() -> Response:
        return Response(generate_latest(app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
