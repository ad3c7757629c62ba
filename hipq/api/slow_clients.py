"""A client that sends its request headers slowly, or nothing at all, is cut off.

uvicorn (0.54) times out only idle keep-alive connections: a connection that never
finishes its headers holds a slot for ever, and a few hundred of them exhaust
``server.max_connections``. This protocol arms a timer when a connection opens and
when a request's first byte arrives, and closes the connection if the headers are
not complete when it fires. (Slow bodies are the ``RequestGuards``' 408.)

The probes (/healthz, /readyz) are answered whatever the connection cap: a liveness
probe that got the cap's 503 would have the process restarted because of clients
that hold connections.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hipq.api.arrival import stamp
from hipq.api.one_send import OneSendProtocol

__all__ = ["header_timeout_protocol"]

_PROBES = (b"/healthz", b"/readyz")


class _HeaderTimeoutProtocol(OneSendProtocol):
    header_timeout: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._header_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        stamp(self.scope, self.loop)  # a request's wait counts from here
        if self.url.split(b"?", 1)[0] not in _PROBES:
            super().on_headers_complete()
            return
        # uvicorn checks ``limit_concurrency`` here, for every path: not for a probe.
        limit, self.limit_concurrency = self.limit_concurrency, None
        try:
            super().on_headers_complete()
        finally:
            self.limit_concurrency = limit

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def header_timeout_protocol(seconds: float) -> type[HttpToolsProtocol]:
    """uvicorn's ``http=`` protocol class, closing connections whose request headers
    take longer than ``seconds``, answering the probes beyond ``limit_concurrency``
    (and sending each response in one write, see ``hipq.api.one_send``; each request's
    arrival stamped, see ``hipq.api.arrival``)."""
    return type("HeaderTimeoutProtocol", (_HeaderTimeoutProtocol,), {"header_timeout": seconds})
