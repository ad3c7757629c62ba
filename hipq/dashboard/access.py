"""Who may use the dashboard, in one place: the API's own bearer tokens and scopes.

Pages need the ``read`` scope (their router declares it, and the API's
``Authentication`` middleware checks it as for any route). An action is a call of a
/v1 route from the browser, with the token as its bearer header, so it needs that
route's scope (``operate`` to retry, cancel, pause, match).

With tokens configured, a person signs in at /dashboard/login. The token is kept in
the tab's ``sessionStorage``, from which the page script sends it as the bearer
header of every API call. Pages rendered on the server are fetched by the browser
itself, which sends no header: for them a cookie (``HttpOnly``, ``SameSite=Strict``,
``Path=/dashboard``) carries the id of a session the server keeps
(``hipq.dashboard.sessions``: revoked at sign-out, expiring, a new id per sign-in).

The cookie lets the browser *read* pages and nothing else: ``PageCookie`` turns its
session into the bearer header only for GET and HEAD requests of dashboard pages. Every
change is a /v1 call that needs the header, which a browser never adds on its own,
so a forged cross-site request can change nothing (the CSRF defence), whatever the
cookie's SameSite does.
"""

from __future__ import annotations

from http.cookies import SimpleCookie
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.params import Depends
from starlette.types import ASGIApp, Receive, Scope, Send

from hipq.api import auth
from hipq.dashboard.sessions import SESSION_SECONDS, Sessions
from hipq.security.tokens import Principal, Tokens

COOKIE = "hipq_dashboard"
PAGE_SCOPE = "read"


def page_access() -> list[Depends]:
    """The dependency of every page route: the read scope."""
    return [Depends(auth.require(PAGE_SCOPE))]


def may_read_pages(principal: Principal | None) -> bool:
    # A token restricted to queues or job types may only submit (hipq.api.auth).
    return principal is not None and principal.has(PAGE_SCOPE) and not principal.restricted


class PageCookie:
    """For a browser's GET of a dashboard page without an Authorization header: the
    sign-in cookie as the bearer token, or, without a cookie that may read, a
    redirect to the sign-in page. Only when tokens are configured."""

    def __init__(self, app: ASGIApp, tokens: Tokens, prefix: str, sessions: Sessions) -> None:
        self.app, self.tokens, self.prefix, self.sessions = app, tokens, prefix, sessions
        self.open_paths = (f"{prefix}/login", f"{prefix}/static/")

    def _is_page(self, scope: Scope) -> bool:
        path: str = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        return (
            scope["method"] in ("GET", "HEAD")
            and (path == self.prefix or path.startswith(self.prefix + "/"))
            and not path.startswith(self.open_paths)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.tokens or not self._is_page(scope):
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        if any(name == b"authorization" for name, _ in headers):
            await self.app(scope, receive, send)
            return
        session_id = _cookie(headers)
        token = None if session_id is None else self.sessions.token_of(session_id)
        if token is None or not may_read_pages(self.tokens.check(token)):
            await _to_login(scope, self.prefix, send)
            return
        scope = {**scope, "headers": [*headers, (b"authorization", b"Bearer " + token.encode())]}
        await self.app(scope, receive, send)


def _cookie(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header is no sign-in
                return None
            if COOKIE in jar and jar[COOKIE].value:
                return jar[COOKIE].value
    return None


async def _to_login(scope: Scope, prefix: str, send: Send) -> None:
    root = scope.get("root_path", "")
    path = scope["path"]
    query = scope.get("query_string", b"").decode("latin-1")
    wanted = path + (f"?{query}" if query else "")
    location = f"{root}{prefix}/login?next={quote(wanted, safe='')}"
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [(b"location", location.encode("latin-1")), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})


def session_router(prefix: str, sessions: Sessions) -> APIRouter:
    """Sign in (the bearer header proves the token; it needs read) and sign out."""
    router = APIRouter(prefix=prefix, include_in_schema=False)

    @router.post("/session", status_code=204, dependencies=page_access())
    async def sign_in(request: Request) -> Response:
        # Without tokens configured hipq is open and there is nothing to keep.
        token = request.headers.get("authorization", "").partition(" ")[2].strip()
        response = Response(status_code=204)
        if not token:
            return response
        # A session that was the browser's before ends: a new id for every sign-in.
        old = _cookie(request.scope.get("headers") or [])
        if old is not None:
            sessions.end(old)
        response.set_cookie(
            COOKIE,
            sessions.start(token),
            max_age=int(SESSION_SECONDS),
            path=request.scope.get("root_path", "") + prefix,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    @router.delete("/session", status_code=204)
    async def sign_out(request: Request) -> Response:
        session_id = _cookie(request.scope.get("headers") or [])
        if session_id is not None:
            sessions.end(session_id)  # revoked: a copy of the cookie reads nothing more
        response = Response(status_code=204)
        response.delete_cookie(
            COOKIE, path=request.scope.get("root_path", "") + prefix, samesite="strict"
        )
        return response

    return router
