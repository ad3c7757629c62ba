"""An external system with a hidden capacity: at most ``capacity`` requests in any
sliding window of ``per`` seconds get a 200; the rest a 429 (with ``Retry-After``
when asked to). It records when each request arrived and what it answered."""

from __future__ import annotations

import time
from collections import deque

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


class CapacityPeer:
    def __init__(self, capacity: int, per: float, retry_after: str | None = None) -> None:
        self.capacity, self.per, self.retry_after = capacity, per, retry_after
        self._window: deque[float] = deque()  # arrival times of the requests it served
        self.answers: list[tuple[float, int]] = []  # (monotonic arrival, status)
        self.app = Starlette(routes=[Route("/work", self._work, methods=["POST"])])

    async def _work(self, request: Request) -> JSONResponse:
        await request.body()
        now = time.monotonic()
        while self._window and self._window[0] <= now - self.per:
            self._window.popleft()
        if len(self._window) >= self.capacity:
            self.answers.append((now, 429))
            headers = {"retry-after": self.retry_after} if self.retry_after else {}
            return JSONResponse({"error": "over capacity"}, 429, headers=headers)
        self._window.append(now)
        self.answers.append((now, 200))
        return JSONResponse({"status": "ok"})

    @property
    def served(self) -> int:
        return sum(1 for _, status in self.answers if status == 200)

    @property
    def refused(self) -> int:
        return sum(1 for _, status in self.answers if status == 429)

    def refused_after(self, share: float) -> tuple[int, int]:
        """(429s, requests) among the last ``1 - share`` of the requests."""
        tail = self.answers[int(len(self.answers) * share) :]
        return sum(1 for _, s in tail if s == 429), len(tail)
