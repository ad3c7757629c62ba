"""Who may call which route: bearer tokens with scopes (see hipq/security/tokens.py).

Each route declares its scope with ``dependencies=[Depends(require("read"))]``, from which
``document`` puts the bearer scheme, the scope and the 401/403 into the OpenAPI schema.
The check itself is the ``Authentication`` middleware's, before a body is read or
validated: a caller without a token learns nothing from a 413 or a 422. A route under
/v1 that declares no scope needs admin (deny by default). Without any token configured,
hipq is open, as on loopback.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from hipq.api.errors import error_body
from hipq.api.models import ErrorOut
from hipq.config import Settings
from hipq.ingest.job_intake import LIST_JOB_TYPES
from hipq.ingest.tenancy import name_refusal, targets_refusal
from hipq.security.tokens import ANONYMOUS, Principal, Tokens

# Where the middleware leaves the caller for the routes (None: no valid token).
PRINCIPAL_KEY = "hipq.principal"

BEARER_DESCRIPTION = "A token from `hipq tokens new`, sent as `Authorization: Bearer <token>`."


class Requires:
    """A route's scope, declared as a FastAPI dependency (checked by ``Authentication``;
    ``solved_by_middleware`` keeps FastAPI from calling it on every request)."""

    def __init__(self, scope: str, *also: str) -> None:
        self.scope = scope
        self.also = also  # scopes needed besides ``scope``

    # No sub-dependency (such as FastAPI's HTTPBearer): ``document`` declares the bearer
    # scheme itself. Called only on a route left out of ``solved_by_middleware``.
    async def __call__(self, request: Request) -> None:
        # The middleware refused the request already if it had to; this only guards
        # against an app built without it.
        if PRINCIPAL_KEY not in request.scope:
            raise RuntimeError("the Authentication middleware is not installed")

    def allows(self, principal: Principal, scope: Scope, settings: Settings) -> bool:
        # A token restricted to queues or job types may only submit (each job is then
        # checked by the intake, hipq.ingest.tenancy): reads and operator routes see
        # every queue.
        if principal.restricted and self.scope != "submit":
            return False
        return all(principal.has(s) for s in (self.scope, *self.also))

    def allows_without_token(self, scope: Scope, settings: Settings) -> bool:
        return False

    def describe(self) -> str:
        if self.also:
            both = " and ".join(f"`{s}`" for s in (self.scope, *self.also))
            return f"**Scope:** {both} (or `admin`)."
        return f"**Scope:** `{self.scope}` (or `admin`)."


class CallbackAccess(Requires):
    """The callback route: a token with the callbacks scope, or, for a job type that
    accepts signatures (``callback_auth``), no token and the route checks the signature."""

    def __init__(self) -> None:
        super().__init__("callbacks")

    def allows(self, principal: Principal, scope: Scope, settings: Settings) -> bool:
        if principal.has("callbacks") and not principal.restricted:
            return True
        return signature_accepted(scope, settings)

    def allows_without_token(self, scope: Scope, settings: Settings) -> bool:
        return signature_accepted(scope, settings)

    def describe(self) -> str:
        return (
            "**Scope:** `callbacks` (or `admin`), or, for a job type whose `callback_auth` "
            "is `signature` or `either`, a valid Standard Webhooks signature instead."
        )


class WorkerAccess(Requires):
    """The pull workers' routes: a token with the workers scope, which its ``type=``
    restriction may narrow to some job types (the route refuses others: 403)."""

    def __init__(self) -> None:
        super().__init__("workers")

    def allows(self, principal: Principal, scope: Scope, settings: Settings) -> bool:
        return principal.has("workers") and principal.queues is None

    def describe(self) -> str:
        return (
            "**Scope:** `workers` (or `admin`); a token restricted with `type=` serves "
            "those job types only."
        )


def check_worker_types(request: Request, types: Sequence[str], field: str) -> None:
    """Refuse job types outside those the caller's worker token is restricted to."""
    principal = principal_of(request)
    if principal is None or principal.types is None:
        return
    for job_type in types:
        if job_type not in principal.types:
            raise Forbidden(
                field, f"token {principal.name!r} may not work on jobs of type {job_type!r}"
            )


def signature_accepted(scope: Scope, settings: Settings) -> bool:
    """Whether the request's ``?type=`` names a job type that accepts a signature."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    names = query.get("type", [])
    job_type = settings.job_types.get(names[-1]) if names else None
    return job_type is not None and job_type.callback_accepts in ("signature", "either")


def require(scope: str, *also: str) -> Requires:
    """The route needs ``scope``, and each of ``also`` besides."""
    return Requires(scope, *also)


def token_proves_callback(request: Request, accepts: str) -> bool:
    """A callback whose token stands in for a signature (the job type accepts one)."""
    principal = request.scope.get(PRINCIPAL_KEY)
    return (
        principal is not None
        and principal.authenticated
        and principal.has("callbacks")
        and not principal.restricted
        and accepts in ("token", "either")
    )


class Forbidden(Exception):
    """A valid token that may not do this (answered 403 in hipq's error shape)."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


def check_names(request: Request, items: Sequence[Mapping[str, Any]], prefix: str = "") -> None:
    """Before intake resolves a tenant's jobs (``items``: their fields as given): refuse
    a type, queue or notification target it may not use, with the same 403 whether or
    not that name exists (``hipq.ingest.tenancy.name_refusal``)."""
    principal = principal_of(request)
    if principal is None or not principal.restricted:
        return
    types = request.app.state.service.job_types
    for i, fields in enumerate(items):
        if refused := name_refusal(principal, fields, types):
            field, why = refused
            where = f"{prefix}{i}]." if prefix else ""
            raise Forbidden(f"{where}{field}", f"token {principal.name!r} {why}")


def check_batch_names(request: Request, on_complete: Mapping[str, Any] | None, notify: Any) -> None:
    """A batch's completion job and ``notify`` targets pass a tenant's checks as a
    job's do (errors name ``batch.on_complete.<field>``, ``batch.notify``)."""
    principal = principal_of(request)
    if principal is None or not principal.restricted:
        return
    types = request.app.state.service.job_types
    refused, where = targets_refusal(principal, notify), "batch."
    if refused is None and on_complete is not None:
        refused, where = name_refusal(principal, on_complete, types), "batch.on_complete."
    if refused is not None:
        field, why = refused
        raise Forbidden(f"{where}{field}", f"token {principal.name!r} {why}")


def owner_of(request: Request) -> str | None:
    """The tenant the caller's lookups are scoped to (``Principal.owner``)."""
    principal = principal_of(request)
    return principal.owner if principal is not None else None


def install(app: FastAPI) -> None:
    @app.exception_handler(Forbidden)
    async def _forbidden(_r: Request, exc: Forbidden) -> JSONResponse:
        return JSONResponse(error_body("forbidden", [(exc.field, exc.message)]), 403)


def principal_of(request: Request) -> Principal | None:
    return request.scope.get(PRINCIPAL_KEY)


def route_requirement(route: BaseRoute | RouteContext) -> Requires | None:
    """The scope a route declares, if any (router-level dependencies included)."""
    for dependency in getattr(route, "dependencies", None) or []:
        if isinstance(dependency.dependency, Requires):
            return dependency.dependency
    return None


_ADMIN = Requires("admin")


def requirement_of(route: BaseRoute | RouteContext) -> Requires | None:
    """What a caller needs for ``route``: its declared scope; admin for an undeclared
    route under /v1 (deny by default); None for an open route."""
    found = route_requirement(route)
    if found is None and (getattr(route, "path", None) or "").startswith("/v1/"):
        return _ADMIN
    return found


def solved_by_middleware(app: FastAPI) -> None:
    """Take each route's declared scope out of what FastAPI solves per request: the
    ``Authentication`` middleware installed with it checks the scope before the route
    runs, and a solved dependency costs every request a sub-dependency's solve and a
    call. The declaration stays in ``route.dependencies``, where ``requirement_of``
    and ``document`` read it."""
    for context in routes(app):
        route = context.original_route
        if not isinstance(route, APIRoute):
            continue
        # A route of an included router is served with the dependant of its inclusion
        # (FastAPI builds one per include, the router's dependencies added): both.
        for dependant in {id(d): d for d in (route.dependant, context.dependant)}.values():
            solved = dependant.dependencies
            solved[:] = [d for d in solved if not isinstance(d.call, Requires)]


def routes(app: FastAPI) -> list[RouteContext]:
    """Every route of ``app`` as served, those of included routers too, with their full
    paths (FastAPI includes routers lazily: ``app.routes`` holds the routers)."""
    return list(iter_route_contexts(app.routes))


def document(app: FastAPI) -> None:
    """The OpenAPI schema says what the middleware does: each operation that needs a
    token carries the bearer scheme, its scope in the description and its 401 and 403
    in hipq's error shape (an undeclared /v1 route: admin), whichever router it is in."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        for route in routes(app):
            requirement = requirement_of(route)
            item = schema.get("paths", {}).get(route.path_format or "")
            if requirement is None or item is None:
                continue
            for method in route.methods or ():
                operation = item.get(method.lower())
                if operation is not None:
                    _declare(operation, requirement)
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        if "ErrorOut" not in schemas:  # no route declared another error in this shape
            error = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(error.pop("$defs", {}))
            schemas["ErrorOut"] = error
        components.setdefault("securitySchemes", {})["bearer"] = {
            "type": "http",
            "scheme": "bearer",
            "description": BEARER_DESCRIPTION,
        }
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _declare(operation: dict[str, Any], requirement: Requires) -> None:
    text = operation.get("description", "")
    if requirement.describe() not in text:
        operation["description"] = f"{text}\n\n{requirement.describe()}".strip()
    if {"bearer": []} not in operation.setdefault("security", []):
        operation["security"].append({"bearer": []})
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
    for status, said in ((401, "No token, or a token that is not valid"), (403, _FORBIDDEN)):
        operation.setdefault("responses", {}).setdefault(
            str(status), {"description": said, "content": error}
        )


_FORBIDDEN = "A valid token without the route's scope"


def _body(status: int, message: str) -> bytes:
    return orjson.dumps(
        error_body("unauthorized" if status == 401 else "forbidden", [(None, message)])
    )


@dataclass(frozen=True)
class _Matcher:
    """A route's path pattern and methods, read once: a request is matched the way
    the router will (the first route whose path and method fit)."""

    route: RouteContext
    pattern: re.Pattern[str] | None
    methods: frozenset[str] | None
    requirement: Requires | None

    @classmethod
    def of(cls, route: RouteContext) -> _Matcher:
        pattern = getattr(route, "path_regex", None)
        methods = route.methods
        return cls(route, pattern, frozenset(methods) if methods else None, requirement_of(route))

    def matches(self, scope: Scope, path: str) -> bool:
        if self.pattern is None:  # not a plain route (a mount): ask it
            return self.route.matches(scope)[0] == Match.FULL
        if self.methods is not None and scope["method"] not in self.methods:
            return False
        return self.pattern.match(path) is not None


class Authentication:
    """Finds the route a request goes to and refuses it (401/403) unless the caller's
    token carries the route's scope; leaves the caller in the scope for the routes."""

    def __init__(self, app: ASGIApp, api: FastAPI, tokens: Tokens, settings: Settings) -> None:
        self.app, self.api, self.tokens, self.settings = app, api, tokens, settings
        self._routes_cache: list[_Matcher] = []
        self._routes_of = -1

    def _routes(self) -> list[_Matcher]:
        # Flattening the included routers costs far more than a request's matching:
        # done again only when a route is added to the app itself.
        if self._routes_of != len(self.api.routes):
            self._routes_cache = [_Matcher.of(r) for r in routes(self.api)]
            self._routes_of = len(self.api.routes)
        return self._routes_cache

    def _requirement(self, scope: Scope) -> Requires | None:
        path = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        for matcher in self._routes():
            if matcher.matches(scope, path):
                return matcher.requirement
        return None  # a 404 or 405: nothing to protect

    def _presented(self, scope: Scope) -> str | None:
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                kind, _, token = value.decode("latin-1").partition(" ")
                return token.strip() if kind.lower() == "bearer" else ""
        return None

    def _refusal(self, scope: Scope) -> tuple[Principal | None, bytes | None]:
        """The caller, and the 401 or 403 body if the route refuses it."""
        presented = self._presented(scope)
        principal = self.tokens.check(presented) if presented else None
        requirement = self._requirement(scope)
        if requirement is None:
            return principal, None
        if principal is None:
            if requirement.allows_without_token(scope, self.settings):
                return None, None
            if presented is None:
                return None, _body(
                    401, "a valid bearer token is required (Authorization: Bearer <token>)"
                )
            return None, _body(401, "the bearer token is not valid")
        if not requirement.allows(principal, scope, self.settings):
            return principal, _body(403, _lacking(principal, requirement))
        return principal, None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        principal: Principal | None = ANONYMOUS
        if self.tokens:
            principal, refusal = self._refusal(scope)
            if refusal is not None:
                status = 401 if principal is None else 403
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(refusal)),
                ]
                if status == 401:
                    headers.append((b"www-authenticate", b'Bearer realm="hipq"'))
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": refusal})
                return
        scope[PRINCIPAL_KEY] = principal
        listing = LIST_JOB_TYPES.set(principal is not None and principal.reads_all)
        try:
            await self.app(scope, receive, send)
        finally:
            LIST_JOB_TYPES.reset(listing)


def _lacking(principal: Principal, requirement: Requires) -> str:
    if principal.restricted and principal.has(requirement.scope):
        return f"token {principal.name!r} is restricted to queues or job types: it may only submit"
    missing = next(
        (s for s in (requirement.scope, *requirement.also) if not principal.has(s)),
        requirement.scope,
    )
    return f"token {principal.name!r} lacks the {missing!r} scope"
