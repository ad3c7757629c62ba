"""An external system that loses some callbacks but answers status requests.

``POST /charges`` takes hipq's request (202) and calls back shortly after, unless
the payload says ``lose: true``. ``GET /status/{key}`` answers ``{"status":
"working"}`` for the first ``working`` polls of a key (``payload.working``, default
0), then its final status (``payload.final``, default ``ok``); with ``busy_status``
the "working" answers are that HTTP status instead. Unknown keys: 404.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.peers import CallbackService


class LossyService(CallbackService):
    def __init__(self, seed: int = 1) -> None:
        super().__init__(seed=seed)
        self.orders: dict[str, dict[str, Any]] = {}
        self.polls: Counter[str] = Counter()
        self.lost: set[str] = set()
        self.app = Starlette(
            routes=[
                Route("/charges", self._take, methods=["POST"]),
                Route("/status/{key}", self._status, methods=["GET"]),
            ]
        )

    async def _take(self, request: Request) -> JSONResponse:
        body = await request.json()
        key = str(body["order_id"])
        self.requests[key] += 1
        self.orders[key] = body
        final = {"status": body.get("final", "ok"), "order_id": key}
        if body.get("lose"):
            self.lost.add(key)
        else:
            self._later(request.headers["x-callback-url"], key, final)
        return JSONResponse({"accepted": True}, 202)

    async def _status(self, request: Request) -> JSONResponse:
        key = request.path_params["key"]
        order = self.orders.get(key)
        if order is None:
            return JSONResponse({"error": "unknown"}, 404)
        self.polls[key] += 1
        await asyncio.sleep(0)
        if self.polls[key] <= int(order.get("working", 0)):
            status = int(order.get("busy_status", 200))
            return JSONResponse({"status": "working", "order_id": key}, status)
        return JSONResponse({"status": order.get("final", "ok"), "order_id": key})
