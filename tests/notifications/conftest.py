"""Fixtures of the notification tests: the API fixtures and a loopback webhook receiver."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from hipq.security.signatures import SignatureError, verify
from tests.api.conftest import api, sqlite_url  # noqa: F401
from tests.peers import free_port, serve_app

SECRET = "whsec_" + "c2VjcmV0LW9mLXRoZS1yZWNlaXZlcg=="  # base64 of "secret-of-the-receiver"


@dataclass
class Receiver:
    """A webhook receiver on a fixed loopback port; ``up()`` serves it, ``status`` is
    what it answers. Every request it got is kept, verified against ``SECRET``."""

    port: int = field(default_factory=free_port)
    status: int = 204
    got: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/outcomes"

    async def _take(self, request: Request) -> Response:
        body = await request.body()
        try:
            verify(SECRET, dict(request.headers), body, now=time.time())
        except SignatureError:
            self.got.append({"id": None, "status": 401, "body": None})
            return Response(status_code=401)
        self.got.append(
            {"id": request.headers["webhook-id"], "status": self.status, "body": orjson.loads(body)}
        )
        return Response(status_code=self.status)

    @asynccontextmanager
    async def up(self) -> AsyncIterator[Receiver]:
        app = Starlette(routes=[Route("/outcomes", self._take, methods=["POST"])])
        async with serve_app(app, port=self.port):
            yield self

    def accepted(self) -> list[dict[str, Any]]:
        return [g for g in self.got if 200 <= g["status"] < 300]


def notify_settings(receiver: Receiver, **extra: Any) -> dict[str, Any]:
    """Overrides for ``open_api``: a webhook target ``hook`` that every test job type uses."""
    targets: dict[str, Any] = {"hook": {"webhook": {"url": receiver.url, "secret": SECRET}}}
    targets.update(extra.pop("targets", {}))
    job_types = {
        name: {
            "transport": {"python": {"handler": f"tests.handlers:{name}"}},
            "retry": {"strategy": "fixed", "delay": "10s", "max_attempts": 2},
            "notify": ["hook"],
        }
        for name in ("ok", "fail", "hang", "permanent")
    }
    return {
        "notifications": {"targets": targets, "retry_initial": "1s", "retry_max": "4s"},
        "job_types": job_types,
        **extra,
    }
