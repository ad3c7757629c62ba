"""A client that sends its request headers slowly, or nothing at all, is cut off.

uvicorn (0.54) times out only idle keep-alive connections: a connection that never
finishes its headers holds a slot for ever, and a few hundred of them exhaust
``server.max_connections``. This protocol arms a timer when a connection opens and
when a request's first byte arrives, and closes the connection if the headers are
not complete when it fires. (Slow bodies are the ``RequestGuards``' 408.)

The probes (/healthz, /readyz) are answered whatever the connection cap: a liveness
probe that got the cap's 503 would have the process restarted because of clients
that hold connections; /readyz is told that the server refuses work (503 "not
ready"), so that a load balancer sends the requests elsewhere.

A peer that holds ``server.max_connections_per_peer`` connections gets a 503 for its
next one at once, before it can send anything, and the refusals at either limit are
logged once per interval (``hipq.api.connection_limits``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hipq.api.arrival import stamp
from hipq.api.connection_limits import AT_CAP, PER_PEER, REFUSING, ConnectionLimits
from hipq.api.errors import error_body
from hipq.api.one_send import OneSendProtocol

__all__ = ["header_timeout_protocol"]

_PROBES = (b"/healthz", b"/readyz")
# uvicorn logs a WARNING for each request it refuses at its cap: ConnectionLimits
# logs them once per interval instead.
# A logger of no hierarchy whose level is above every message's.
_QUIET = logging.Logger("hipq.api.refused_at_cap", logging.CRITICAL + 1)


def _refusal(message: str) -> bytes:
    body = orjson.dumps(error_body("too_many_connections", [(None, message)]))
    head = (
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n" % len(body)
    )
    return head + body


_PEER_REFUSAL = _refusal(f"this address holds its {PER_PEER} connections: try again later")


class _HeaderTimeoutProtocol(OneSendProtocol):
    header_timeout: float = 10.0
    limits: ConnectionLimits = ConnectionLimits(None)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._peer: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = self.client[0] if self.client else None
        if not self.limits.admit(peer):
            self.limits.refused(PER_PEER, self.loop)
            transport.write(_PEER_REFUSAL)
            transport.close()
            return
        self._peer = peer
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._peer is not None:
            self.limits.release(self._peer)
            self._peer = None
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._header_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        stamp(self.scope, self.loop)  # a request's wait counts from here
        limit = self.limit_concurrency
        # As uvicorn decides it in ``on_headers_complete``.
        at_cap = limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit)
        if self.url.split(b"?", 1)[0] not in _PROBES:
            if not at_cap:
                super().on_headers_complete()
                return
            self.limits.refused(AT_CAP, self.loop)
            logger, self.logger = self.logger, _QUIET
            try:
                super().on_headers_complete()
            finally:
                self.logger = logger
            return
        self.scope[REFUSING] = self.limits.refusing(self.loop, at_cap)  # type: ignore[literal-required]
        # uvicorn checks ``limit_concurrency`` here, for every path: not for a probe.
        self.limit_concurrency = None
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


def header_timeout_protocol(
    seconds: float, limits: ConnectionLimits | None = None
) -> type[HttpToolsProtocol]:
    """uvicorn's ``http=`` protocol class, closing connections whose request headers
    take longer than ``seconds``, answering the probes beyond ``limit_concurrency``,
    holding each peer to ``limits`` (and sending each response in one write, see
    ``hipq.api.one_send``; each request's arrival stamped, see ``hipq.api.arrival``)."""
    return type(
        "HeaderTimeoutProtocol",
        (_HeaderTimeoutProtocol,),
        {"header_timeout": seconds, "limits": limits or ConnectionLimits(None)},
    )
