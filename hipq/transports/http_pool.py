"""An httpx transport whose cost per request does not grow with the number of connections.

httpcore's connection pool walks every connection, and polls every idle socket, on
each request and each release (encode/httpcore#1035, not merged as of httpcore
1.0.9). With hundreds of requests in flight that walk became most of the CPU of
the http transport: a loopback benchmark sent 157 requests/s through a pool of 500
connections, and 1,500 through this one.

This transport keeps httpcore's connection (HTTP/1.1, TLS, connect, read and write
timeouts) and replaces only the bookkeeping: a semaphore for the limit on requests
in flight, and per origin a stack of idle connections, each checked only when it
is taken. HTTP/2 and proxies are not used by the http transport and not offered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpcore
import httpx

# httpcore's exceptions as httpx's, looked up along the raised type's MRO so that
# the most specific match wins (a ReadTimeout is not reported as a TimeoutException).
_EXCEPTIONS: dict[type[Exception], type[httpx.HTTPError]] = {
    httpcore.ConnectTimeout: httpx.ConnectTimeout,
    httpcore.ReadTimeout: httpx.ReadTimeout,
    httpcore.WriteTimeout: httpx.WriteTimeout,
    httpcore.PoolTimeout: httpx.PoolTimeout,
    httpcore.TimeoutException: httpx.TimeoutException,
    httpcore.ConnectError: httpx.ConnectError,
    httpcore.ReadError: httpx.ReadError,
    httpcore.WriteError: httpx.WriteError,
    httpcore.NetworkError: httpx.NetworkError,
    httpcore.LocalProtocolError: httpx.LocalProtocolError,
    httpcore.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore.ProtocolError: httpx.ProtocolError,
    httpcore.UnsupportedProtocol: httpx.UnsupportedProtocol,
}
_DEFAULT_PORTS = {b"http": 80, b"https": 443}

# httpx logs every request at INFO with its full URL (userinfo and query included:
# passwords, tokens), and httpcore logs connection details at DEBUG. A job's URL is
# the job type's secret to keep: both stay quiet below WARNING, whatever hipq's
# own log level (the attempt's error says what went wrong, without the URL).
for _chatty in ("httpx", "httpcore"):
    logging.getLogger(_chatty).setLevel(logging.WARNING)

Key = tuple[bytes, bytes, int]


@contextlib.contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for kind in type(exc).__mro__:
            mapped = _EXCEPTIONS.get(kind)
            if mapped is not None:
                raise mapped(str(exc)) from exc
        raise


class _Lease:
    """One request's hold on a slot and a connection, given back exactly once."""

    __slots__ = ("connection", "done", "key", "pool")

    def __init__(self, pool: PooledTransport, key: Key, connection: httpcore.AsyncHTTPConnection):
        self.pool = pool
        self.key = key
        self.connection = connection
        self.done = False

    async def give_back(self) -> None:
        if self.done:
            return
        self.done = True
        await self.pool._give_back(self.key, self.connection)


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: Any, lease: _Lease) -> None:
        self._stream = stream
        self._lease = lease

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        try:
            with _as_httpx_errors():
                await self._stream.aclose()
        finally:
            await self._lease.give_back()


class PooledTransport(httpx.AsyncBaseTransport):
    """At most ``max_connections`` requests in flight; up to ``max_idle`` kept alive."""

    def __init__(
        self,
        max_connections: int = 100,
        max_idle: int | None = None,
        keepalive_expiry: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self._slots = asyncio.Semaphore(max_connections)
        self._max_idle = max_connections if max_idle is None else max_idle
        self._keepalive_expiry = keepalive_expiry
        self._ssl_context = ssl_context or httpx.create_ssl_context()
        # Idle connections, oldest first: the limit and expiry act on this order.
        self._idle_order: OrderedDict[httpcore.AsyncHTTPConnection, Key] = OrderedDict()
        # Per origin, the same connections as a stack (most recent last). An entry
        # evicted from the order stays here until it reaches the bottom and is skipped.
        self._idle: dict[Key, deque[httpcore.AsyncHTTPConnection]] = {}
        self._open: set[httpcore.AsyncHTTPConnection] = set()
        self._closed = False

    @property
    def open_connections(self) -> int:
        return len(self._open)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        scheme = url.raw_scheme
        if scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        if not url.raw_host:
            raise httpx.UnsupportedProtocol(f"request URL {url} has no host")
        if self._closed:
            raise RuntimeError("the transport is closed")
        port = url.port or _DEFAULT_PORTS[scheme]
        key = (scheme, url.raw_host, port)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=scheme, host=url.raw_host, port=port, target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        await self._take_slot(request.extensions.get("timeout", {}).get("pool"))
        try:
            if self._closed:
                raise RuntimeError("the transport is closed")
            while True:
                connection = await self._connection(key)
                try:
                    with _as_httpx_errors():
                        response = await connection.handle_async_request(core_request)
                except httpcore.ConnectionNotAvailable:
                    # An idle connection that could not take the request after all.
                    await self._discard(connection)
                    continue
                except BaseException:
                    await self._discard(connection)
                    raise
                break
        except BaseException:
            self._slots.release()
            raise
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream, _Lease(self, key, connection)),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        self._closed = True
        connections, self._open = list(self._open), set()
        self._idle.clear()
        self._idle_order.clear()
        for connection in connections:
            await connection.aclose()

    async def _take_slot(self, within: float | None) -> None:
        if within is None:
            await self._slots.acquire()
            return
        try:
            async with asyncio.timeout(within):
                await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout(f"no connection free within {within:g}s") from None

    async def _connection(self, key: Key) -> httpcore.AsyncHTTPConnection:
        """The most recently used idle connection that still works, or a new one."""
        stack = self._idle.get(key)
        while stack:
            connection = stack.pop()
            if self._idle_order.pop(connection, None) is None:
                continue  # evicted meanwhile
            if connection.is_idle() and not connection.has_expired():
                return connection
            await self._discard(connection)
        self._idle.pop(key, None)
        scheme, host, port = key
        connection = httpcore.AsyncHTTPConnection(
            httpcore.Origin(scheme, host, port),
            ssl_context=self._ssl_context if scheme == b"https" else None,
            keepalive_expiry=self._keepalive_expiry,
        )
        self._open.add(connection)
        return connection

    async def _give_back(self, key: Key, connection: httpcore.AsyncHTTPConnection) -> None:
        self._slots.release()
        if self._closed or not self._max_idle or not connection.is_idle():
            await self._discard(connection)
            return
        # Make room, oldest first, and close the oldest once expired, whatever their
        # origin: sockets a peer has long closed are not kept for a request to it.
        while self._idle_order:
            oldest = next(iter(self._idle_order))
            if len(self._idle_order) < self._max_idle and not oldest.has_expired():
                break
            del self._idle_order[oldest]
            await self._discard(oldest)
        stack = self._idle.setdefault(key, deque())
        while stack and stack[0] not in self._idle_order:
            stack.popleft()
        stack.append(connection)
        self._idle_order[connection] = key

    async def _discard(self, connection: httpcore.AsyncHTTPConnection) -> None:
        self._open.discard(connection)
        await connection.aclose()
