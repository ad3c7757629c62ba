"""A stand-in receiver for HTTP jobs sent by `hipq serve` subprocesses, run in a thread
of the test process: it answers 202, holds each request for ``hold`` seconds, then
calls back on the callback URL the request carries.

It measures what a user of a throttled peer cares about: the weight in flight per
region, per tenant and in total (from the request's arrival until its callback
leaves), its peaks, and which hipq process sent each request (the port of the
callback URL it carries: each process's own).

``answer_late`` holds the 202 itself until the callback leaves (the sender sees its
request sent only then: an early callback); ``callback_port``, when set, sends every
callback to that process instead, as a balancer in front of the processes would.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.peers import free_port, serve_app


class Receiver:
    def __init__(self, hold: float = 0.03, *, answer_late: bool = False) -> None:
        self.hold, self.answer_late = hold, answer_late
        self.callback_port: int | None = None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.in_flight: Counter[str] = Counter()  # weight per "*", "region=..", "tenant=.."
        self.peak: Counter[str] = Counter()
        self.requests: Counter[int] = Counter()  # job number -> requests received
        self.by_port: Counter[int] = Counter()  # callback port (the sender) -> requests
        self.in_flight_by_port: Counter[int] = Counter()  # the sender -> requests held
        self.callbacks_failed = 0
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="receiver", daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the receiver did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        loop, stop = self._loop, self._stop
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
        self._thread.join(30)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._client = httpx.AsyncClient(timeout=30)
        self._tasks: set[asyncio.Task[None]] = set()
        app = Starlette(routes=[Route("/work", self._work, methods=["POST"])])
        async with serve_app(app, self.port):
            self._ready.set()
            await self._stop.wait()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._client.aclose()

    def _keys(self, body: dict[str, Any]) -> list[str]:
        return ["*", f"region={body['region']}", f"tenant={body['tenant']}"]

    async def _work(self, request: Request) -> JSONResponse:
        body = await request.json()
        callback = body["callback_url"]
        sender = urlsplit(callback).port or 0
        with self._lock:
            self.requests[body["n"]] += 1
            self.by_port[sender] += 1
            self.in_flight_by_port[sender] += 1
            for key in self._keys(body):
                self.in_flight[key] += body["w"]
                self.peak[key] = max(self.peak[key], self.in_flight[key])
        if self.callback_port is not None:
            balanced = urlsplit(callback)._replace(netloc=f"127.0.0.1:{self.callback_port}")
            callback = balanced.geturl()
        task = asyncio.create_task(self._call_back(callback, body, sender))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if self.answer_late:
            await asyncio.sleep(self.hold)
        return JSONResponse({"accepted": True}, 202)

    async def _call_back(self, url: str, body: dict[str, Any], sender: int) -> None:
        await asyncio.sleep(self.hold)
        with self._lock:  # done before the callback: its job may then settle
            self.in_flight_by_port[sender] -= 1
            for key in self._keys(body):
                self.in_flight[key] -= body["w"]
        for attempt in range(5):
            try:
                response = await self._client.post(url, json={"status": "ok"})
                if response.status_code < 300:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2 * 2**attempt)
        with self._lock:
            self.callbacks_failed += 1
