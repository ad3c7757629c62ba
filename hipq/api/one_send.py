"""Each HTTP response leaves in one send: its head together with its first body bytes.

uvicorn (0.54) writes a response's status line and headers, then its body, with two
``transport.write`` calls: two syscalls and, the socket sending without Nagle's delay,
two TCP segments, each of which the kernel delivers and the client wakes for. Here
the head waits for the body's first write (at the latest until the next turn of the
event loop, for a response whose body comes later or never, such as HEAD's) and both
go out in one send.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

__all__ = ["OneSendProtocol"]

# A body larger than this is not copied to join the head: a second send costs less.
_JOIN_AT_MOST = 64 * 1024


class _HeadWithBody:
    """One request's transport, as its response cycle sees it: the first write after
    the response started (its head) is held until the next write, then both are sent
    as one. Everything else goes straight to the connection's transport."""

    def __init__(
        self,
        transport: asyncio.Transport,
        cycle: RequestResponseCycle,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._transport = transport
        self._cycle = cycle
        self._loop = loop
        self._head: bytes | None = None
        self._head_sent = False

    def write(self, data: bytes) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            self._head_sent = True
            if len(data) <= _JOIN_AT_MOST:
                self._transport.write(head + data)
                return
            self._transport.write(head)
        elif not self._head_sent and self._cycle.response_started:
            # The head: wait for the body (a "100 Continue" comes before the start).
            self._head = bytes(data)
            self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            self._head_sent = True
            self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneSendProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, its responses sent head and body together."""

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle is not before:  # a new request (not an upgrade)
            cycle.transport = _HeadWithBody(self.transport, cycle, self.loop)  # type: ignore[assignment]

    def shutdown(self) -> None:
        # A head still held goes out before the connection closes.
        if self.cycle is not None and isinstance(self.cycle.transport, _HeadWithBody):
            self.cycle.transport.flush()
        super().shutdown()
