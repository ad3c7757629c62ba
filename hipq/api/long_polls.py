"""Requests held open (``GET /v1/jobs/{id}?wait=``), bounded per caller.

A held request keeps its connection: without a bound, one ``read`` token holding
``server.max_connections`` of them would take the API from everyone. Each token holds
at most ``server.max_waits_per_token`` at once; one more is answered 429 with
Retry-After. A hipq without tokens (loopback, or behind a gateway whose one address
every caller would share) has no callers to tell apart, and no bound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import Request
from fastapi.responses import JSONResponse

from hipq.api.auth import principal_of
from hipq.api.errors import error_body

__all__ = ["LongPolls", "TooManyWaits"]

# What a refused caller is told to wait: a held request ends within 60 s, most sooner.
RETRY_AFTER_SECONDS = 1


class TooManyWaits(Exception):
    """The caller already holds its bound of waiting requests (answered 429)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"at most {limit} requests with ?wait= at once per token")
        self.limit = limit

    def answer(self) -> JSONResponse:
        return JSONResponse(
            error_body("too_many_requests", [("wait", str(self))]),
            429,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )


class LongPolls:
    def __init__(self, per_caller: int) -> None:
        self.per_caller = per_caller
        self._held: Counter[str] = Counter()

    @contextmanager
    def hold(self, request: Request) -> Iterator[None]:
        principal = principal_of(request)
        if principal is None or not principal.authenticated:
            yield
            return
        caller = principal.name
        if self._held[caller] >= self.per_caller:
            raise TooManyWaits(self.per_caller)
        self._held[caller] += 1
        try:
            yield
        finally:
            self._held[caller] -= 1
            if not self._held[caller]:
                del self._held[caller]
