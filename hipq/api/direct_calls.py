"""A route's endpoint called with its parameters as FastAPI reads them, without the rest
of FastAPI's per-request work.

For each request FastAPI solves the route's dependencies anew: the four kinds of
parameters (parsing the query string and the cookies whether the route reads them or
not), a sub-response, the content type parsed as a MIME header, telemetry hooks.
On ``POST /v1/jobs`` that cost about as much as hipq's own work on the job. A
``DirectCall`` reads only the parameters the route declares, with FastAPI's own
functions (the same values, defaults and validation), and calls the endpoint.

It answers only what surely succeeds the same way: when any parameter is refused it
returns None, and FastAPI handles the request from the start (its 422, in its
words). Only routes it can call exactly as FastAPI would are taken: an async
endpoint that returns a ``Response`` itself, with no dependencies left to solve
(scopes are the ``Authentication`` middleware's, see ``hipq.api.auth``) and no
parameter FastAPI makes up (background tasks, a sub-response, security scopes).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import routing as fastapi_routing
from fastapi._compat import ModelField
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import (
    get_typed_return_annotation,
    request_body_to_args,
    request_params_to_args,
)
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

__all__ = ["DirectCall", "direct_call"]

DirectCall = Callable[[Request, Any], Awaitable[Response | None]]

# FastAPI serves a route of an included router with the dependant of that inclusion
# (the router's dependencies added), set here while the route's handler is built.
# Without it (another FastAPI), no route is called directly.
_EFFECTIVE_ROUTE = getattr(fastapi_routing, "_effective_route_context_var", None)


def _made_up_parameters(dependant: Dependant) -> bool:
    return any(
        (
            dependant.websocket_param_name,
            dependant.http_connection_param_name,
            dependant.response_param_name,
            dependant.background_tasks_param_name,
            dependant.security_scopes_param_name,
        )
    )


def _returns_response(call: Callable[..., Any]) -> bool:
    try:
        annotation = get_typed_return_annotation(call)
    except Exception:  # an annotation that does not resolve: leave it to FastAPI
        return False
    return inspect.isclass(annotation) and issubclass(annotation, Response)


class _AbsentHeaders:
    """Optional header parameters, and every name FastAPI may read each one under: when
    a request sends none of them, each takes its default, as FastAPI gives it (a copy,
    unvalidated), without FastAPI's lookup of each one."""

    def __init__(self, fields: list[ModelField], names: frozenset[bytes]) -> None:
        self.fields, self.names = fields, names

    def none_in(self, headers: list[tuple[bytes, bytes]]) -> bool:
        return not any(name in self.names for name, _ in headers)

    def defaults(self) -> dict[str, Any]:
        return {field.name: copy.deepcopy(field.default) for field in self.fields}


def _absent_headers(fields: list[ModelField]) -> _AbsentHeaders | None:
    names: set[bytes] = set()
    for field in fields:
        info = field.field_info
        extra = info.validation_alias
        if info.is_required() or info.validate_default or not isinstance(extra, str | None):
            return None  # FastAPI reads or checks more than a name: its own lookup
        for name in (field.name, field.alias or field.name, extra or field.name):
            for spelling in (name, name.replace("_", "-")):
                names.add(spelling.lower().encode("latin-1"))
    return _AbsentHeaders(fields, frozenset(names))


def direct_call(route: APIRoute) -> DirectCall | None:
    """The direct call of ``route`` (while FastAPI builds its handler), or None when
    FastAPI must handle it."""
    if _EFFECTIVE_ROUTE is None:
        return None
    effective = _EFFECTIVE_ROUTE.get()
    if effective is not None and getattr(effective, "original_route", None) is route:
        dependant = effective.dependant
        embed = bool(getattr(effective, "_embed_body_fields", False))
    else:
        dependant = route.dependant
        embed = bool(getattr(route, "_embed_body_fields", False))
    call = dependant.call
    if (
        call is None
        or not inspect.iscoroutinefunction(call)
        or _made_up_parameters(dependant)
        or not _returns_response(call)
    ):
        return None

    absent = _absent_headers(dependant.header_params)

    async def called(request: Request, body: Any) -> Response | None:
        # Scopes are taken out after the handlers are built (``solved_by_middleware``):
        # a dependency still here is one FastAPI must solve.
        if dependant.dependencies:
            return None
        values: dict[str, Any] = {}
        if dependant.path_params:
            found, errors = request_params_to_args(dependant.path_params, request.path_params)
            if errors:
                return None
            values.update(found)
        if dependant.header_params:
            if absent is not None and absent.none_in(request.scope["headers"]):
                values.update(absent.defaults())
            else:
                found, errors = request_params_to_args(dependant.header_params, request.headers)
                if errors:
                    return None
                values.update(found)
        for params, read in (
            (dependant.query_params, lambda: request.query_params),
            (dependant.cookie_params, lambda: request.cookies),
        ):
            if params:
                found, errors = request_params_to_args(params, read())
                if errors:
                    return None
                values.update(found)
        if dependant.body_params:
            found, errors = await request_body_to_args(
                body_fields=dependant.body_params, received_body=body, embed_body_fields=embed
            )
            if errors:
                return None
            values.update(found)
        if dependant.request_param_name:
            values[dependant.request_param_name] = request
        answer = await call(**values)
        if not isinstance(answer, Response):
            raise TypeError(f"{route.path}: the endpoint returned no Response")
        return answer

    return called
