"""Refusals before any route runs: a Host outside the allow-list (DNS rebinding), a
foreign Origin or a non-JSON body on a state-changing route (a cross-site form), and
a request body that stops arriving (a slow client holding a connection).

Starlette's TrustedHostMiddleware checks the Host too, but answers in plain text;
hipq's clients read its JSON error shape, and the Origin and content-type checks
need the same allow-list, so the three live here together.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hipq.api.errors import response_started, send_error
from hipq.config import ServerConfig

__all__ = ["RequestGuards", "allowed_hosts", "possible_refusals"]

_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Probes (a container orchestrator's) address the process by its IP: they are
# answered whatever the Host, and give nothing a rebinding page could use.
_PROBES = frozenset({"/healthz", "/readyz"})
_LOOPBACK = ("localhost", "127.0.0.1", "::1")
_CODES = {
    400: "bad_request",
    421: "misdirected_request",
    403: "forbidden",
    415: "unsupported_media_type",
}
_DEFAULT_PORTS = {"http": 80, "https": 443}


def allowed_hosts(server: ServerConfig) -> frozenset[str]:
    """Host names the API answers to: loopback names (a rebinding page cannot send
    them), ``server.allowed_hosts``, and the host of ``public_url`` (external systems
    call back there)."""
    names = {*_LOOPBACK, *server.allowed_hosts}
    if server.public_url:
        names.add(urlsplit(server.public_url).hostname or "")
    return frozenset(n.lower() for n in names if n)


def possible_refusals(path: str, method: str, reads_body: bool) -> dict[int, str]:
    """What ``RequestGuards`` may answer for a route, for its OpenAPI declaration (kept
    beside the checks it describes)."""
    refusals: dict[int, str] = {}
    if path not in _PROBES:
        refusals[400] = "More than one Host header"
        refusals[421] = "The Host header names a host not served here (`server.allowed_hosts`)"
    if method in _STATE_CHANGING:
        refusals[403] = "A request from another site (its Origin is not allowed)"
        if path.startswith("/v1/") and not path.startswith("/v1/callbacks/"):
            refusals[415] = "A body that is not JSON (send `content-type: application/json`)"
    if reads_body:
        refusals[408] = "The request body was not complete within `server.body_read_timeout`"
    return refusals


@lru_cache(maxsize=256)
def _host_name(value: str) -> str:
    """``example.com:8000`` -> ``example.com``; ``[::1]:8000`` -> ``::1``; "" if
    it is no host name at all (``[::1``)."""
    try:
        return (urlsplit("//" + value).hostname or "").lower() if value else ""
    except ValueError:
        return ""


def _origin(value: str) -> tuple[str, str, int] | None:
    """``https://Example.com`` -> ``("https", "example.com", 443)``: what makes two
    origins the same one. None for what is no http(s) origin (``null``, ``file://``)."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


class _BodyTimeout(Exception):
    pass


class RequestGuards:
    def __init__(self, app: ASGIApp, server: ServerConfig) -> None:
        self.app = app
        self.hosts = allowed_hosts(server)
        self.any_host = "*" in self.hosts
        listed = [*server.allowed_origins, *([server.public_url] if server.public_url else [])]
        self.origins = frozenset(o for o in map(_origin, listed) if o is not None)
        self.body_timeout = server.body_read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _checked_headers(scope)
        # Two Host headers: a proxy may have checked the first, hipq would see the last.
        if headers is None:
            await send_error(send, 400, _CODES[400], "host", "more than one Host header")
            return
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, field, message = refusal
            await send_error(send, status, _CODES[status], field, message)
            return

        # One deadline for the whole body, not per chunk: a byte every few seconds
        # would otherwise hold the connection for ever. Once the body is in, a receive
        # (a wait for the client's disconnect) is not timed.
        deadline = asyncio.get_running_loop().time() + self.body_timeout
        body_done = False

        async def timed_receive() -> Message:
            nonlocal body_done
            if body_done:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise _BodyTimeout from None
            body_done = message["type"] != "http.request" or not message.get("more_body")
            return message

        try:
            await self.app(scope, timed_receive, send)
        except _BodyTimeout:
            if not response_started(scope):
                await send_error(
                    send,
                    408,
                    "request_timeout",
                    None,
                    f"the request body was not complete within {self.body_timeout:g}s",
                )

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str, str] | None:
        host = _host_name(headers.get("host", ""))
        if not self.any_host and host not in self.hosts and scope["path"] not in _PROBES:
            return 421, "host", "this host name is not served here (see server.allowed_hosts)"
        if scope["method"] not in _STATE_CHANGING:
            return None
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, headers.get("host", "")):
            return 403, "origin", "requests from another site are refused"
        # The API takes JSON; external systems post callbacks in whatever type they use
        # (and pages served outside /v1/ bring their own CSRF defence).
        if not scope["path"].startswith("/v1/") or scope["path"].startswith("/v1/callbacks/"):
            return None
        kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind and not (kind == "application/json" or kind.endswith("+json")):
            return (
                415,
                "content-type",
                "state-changing requests take JSON: send content-type: application/json",
            )
        return None

    def _origin_allowed(self, origin: str, host: str) -> bool:
        """An origin listed (``allowed_origins``, ``public_url``'s), or the API's own:
        the scheme, host and port the request was sent to. A page of the same host on
        another port is another origin (another service, perhaps less trusted)."""
        key = _origin(origin)
        if key is None:
            return False
        if key in self.origins:
            return True
        scheme, name, port = key
        try:
            sent_to = urlsplit("//" + host)
            sent_port = sent_to.port or _DEFAULT_PORTS[scheme]
        except ValueError:
            return False
        # The scheme the page used is not known here (TLS may end at a proxy): its
        # port, as the Host header names it, is what tells two origins of one host apart.
        allowed = self.any_host or name in self.hosts
        return allowed and sent_to.hostname == name and sent_port == port


# The request headers the guards read (ASGI servers send names in lower case).
_READ = frozenset({b"host", b"origin", b"content-type"})


def _checked_headers(scope: Scope) -> dict[str, str] | None:
    """The headers the guards read, decoded (the last of a repeated one); None when the
    request has more than one Host header. Only these are decoded: every request
    passes here."""
    found: dict[str, str] = {}
    hosts = 0
    for name, value in scope["headers"]:
        if name in _READ:
            key = name.decode("latin-1")
            if key == "host":
                hosts += 1
            found[key] = value.decode("latin-1")
    return None if hosts > 1 else found
