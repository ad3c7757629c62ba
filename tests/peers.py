"""External systems for hipq to talk to: real servers and clients on 127.0.0.1.

``CallbackService`` is an HTTP service that accepts hipq's requests and answers later
on the callback URL they carry. What it does is chosen per request by the payload's
``behavior``:

- ``normal``: answer 202, then call back after a short random delay;
- ``early``: call back first, then answer hipq's request (the response is early);
- ``twice``: answer, then call back two times (a duplicate);
- ``never_once``: ignore the first request of a key; behave normally from the second;
- ``hold``: answer, and call back only when the test calls ``release(key)``;
- ``declined``: call back with a failure status.

``serve_app`` runs any ASGI app under uvicorn on a free loopback port.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hipq.transports.http_pool import PooledTransport


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.asynccontextmanager
async def serve_app(app: Any, port: int | None = None, **config: Any) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 until the block ends; yields its base URL.

    ``config``: more uvicorn settings (``timeout_keep_alive``...)."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", **config
        )
    )
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


class CallbackService:
    def __init__(self, seed: int = 1, delay: tuple[float, float] = (0.0, 0.05)) -> None:
        self.rng = random.Random(seed)
        self.delay = delay
        self.requests: Counter[str] = Counter()  # correlation key -> requests received
        self.callbacks: Counter[str] = Counter()  # correlation key -> callbacks delivered
        self.held: dict[str, str] = {}  # key -> callback URL, for `hold`
        # The transport hipq sends with: it holds up to 64 callbacks in flight.
        self.client = httpx.AsyncClient(timeout=30, transport=PooledTransport(64))
        self._tasks: set[asyncio.Task[None]] = set()
        self.app = Starlette(routes=[Route("/charges", self._charge, methods=["POST"])])

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.client.aclose()

    async def _charge(self, request: Request) -> JSONResponse:
        body = await request.json()
        url = request.headers["x-callback-url"]
        key = str(body["order_id"])
        self.requests[key] += 1
        behavior = body.get("behavior", "normal")
        if behavior == "never_once" and self.requests[key] == 1:
            return JSONResponse({"accepted": True}, 202)
        if behavior == "early":
            await self.call_back(url, key, {"status": "ok", "order_id": key})
        elif behavior == "hold":
            self.held[key] = url
        elif behavior == "declined":
            self._later(url, key, {"status": "declined", "order_id": key})
        else:
            times = 2 if behavior == "twice" else 1
            self._later(url, key, {"status": "ok", "order_id": key}, times)
        return JSONResponse({"accepted": True}, 202)

    def _later(self, url: str, key: str, body: dict[str, Any], times: int = 1) -> None:
        async def run() -> None:
            for _ in range(times):
                await asyncio.sleep(self.rng.uniform(*self.delay))
                await self.call_back(url, key, body)

        task = asyncio.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def call_back(self, url: str, key: str, body: dict[str, Any]) -> httpx.Response:
        """Deliver a callback; like real webhook senders, retry a transport failure."""
        for attempt in range(5):
            try:
                response = await self.client.post(url, json=body)
                break
            except httpx.TransportError:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.2 * 2**attempt)
        response.raise_for_status()
        self.callbacks[key] += 1
        return response

    async def release(self, key: str) -> httpx.Response:
        return await self.call_back(self.held.pop(key), key, {"status": "ok", "order_id": key})
