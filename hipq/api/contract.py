"""The OpenAPI schema as hipq's contract: what every route answers, declared in one place.

Routes declare their own answers (``responses=``: a 404, a 409, a 202). What the layers
around every route answer is declared here, from the same facts those layers decide by:
the request guards (``request_guards.possible_refusals``), the body limit (413), the
database and start-up budget (503 with Retry-After), validation (422 in hipq's error
shape, never FastAPI's ``{"detail": [...]}``), and the callbacks' signature headers.
Operation ids are the route functions' names. The committed ``openapi.json`` is this
schema as served by default settings (``hipq openapi`` prints it).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from hipq.api.request_guards import possible_refusals

__all__ = ["document", "operation_id", "schema_text"]

_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "seconds to wait before sending the same request again",
        "schema": {"type": "string"},
    }
}
# FastAPI's own description of a response declared with a model and no words.
_UNDESCRIBED = ("Additional Response", "")
_DESCRIPTIONS = {
    "404": "Not found: `field` names what is missing",
    "409": "Conflicts with the current state; `message` says how",
    "413": "The request body exceeds `server.max_body_bytes`",
    "422": "A parameter or the body refused; `field` names it",
    "503": "The database is unavailable or busy, or hipq is starting: nothing was stored; "
    "send the same request again after `Retry-After` seconds",
}

# Standard Webhooks headers an external system signs a callback with.
_SIGNATURE_HEADERS = {
    "webhook-id": "the message id; the same id again within the tolerance is a replay",
    "webhook-timestamp": "seconds since the epoch when the message was signed",
    "webhook-signature": "`v1,<base64 HMAC-SHA256>` of `id.timestamp.body`, space-separated",
}
_CALLBACK_BODY = {
    "required": False,
    "description": "the external system's answer: JSON, or any other text (kept as text)",
    "content": {
        "application/json": {"schema": {}},
        "text/plain": {"schema": {"type": "string"}},
    },
}


def operation_id(route: APIRoute) -> str:
    """``create_job``, not ``create_job_v1_jobs_post``: the route function's name
    (``document`` refuses two routes of one name)."""
    return route.name


def document(app: FastAPI) -> None:
    """Wrap ``app.openapi`` so the schema declares what the layers around each route
    answer (call after every other wrapper of ``app.openapi``)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        _check_operation_ids(schema)
        for path, item in schema.get("paths", {}).items():
            for method, operation in item.items():
                _declare(path, method, operation)
        schemas = schema.get("components", {}).get("schemas", {})
        for fastapi_default in ("HTTPValidationError", "ValidationError"):
            schemas.pop(fastapi_default, None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def schema_text(schema: dict[str, Any]) -> str:
    """The schema as committed: sorted keys, two-space indent, a final newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _check_operation_ids(schema: dict[str, Any]) -> None:
    ids = Counter(
        op.get("operationId") for item in schema.get("paths", {}).values() for op in item.values()
    )
    twice = sorted(str(name) for name, n in ids.items() if n > 1)
    if twice:
        raise RuntimeError(f"two routes share the function name {twice[0]!r}: rename one")


def _declare(path: str, method: str, operation: dict[str, Any]) -> None:
    responses: dict[str, Any] = operation.setdefault("responses", {})
    _replace_validation_error(operation, responses)
    if path.startswith("/v1/callbacks/"):
        _declare_signed_callback(operation)
    reads_body = "requestBody" in operation
    for refusal, said in possible_refusals(path, method.upper(), reads_body).items():
        _add(responses, refusal, said)
    _add(responses, 413, _DESCRIPTIONS["413"])
    if path.startswith("/v1/"):
        _add(responses, 503, _DESCRIPTIONS["503"], headers=_RETRY_AFTER)
    for status, response in responses.items():
        if response.get("description") in _UNDESCRIBED and status in _DESCRIPTIONS:
            response["description"] = _DESCRIPTIONS[status]


def _add(
    responses: dict[str, Any], status: int, said: str, headers: dict[str, Any] | None = None
) -> None:
    """Declare an error in hipq's shape; a status the route declares already gets the
    further reason appended (a 403 for a missing scope may also be a foreign Origin)."""
    existing = responses.get(str(status))
    if existing is None:
        responses[str(status)] = {"description": said, "content": _ERROR}
        if headers:
            responses[str(status)]["headers"] = headers
        return
    if existing.get("description") in _UNDESCRIBED:
        existing["description"] = said
    elif said not in existing["description"]:
        existing["description"] = f"{existing['description']}; or: {said}"
    if headers:
        existing.setdefault("headers", {}).update(headers)


def _replace_validation_error(operation: dict[str, Any], responses: dict[str, Any]) -> None:
    """FastAPI's default 422 names a shape hipq never sends: hipq's instead, and only
    where a parameter or a body can be refused at all."""
    default = responses.get("422")
    if default is None or "HTTPValidationError" not in json.dumps(default):
        return
    del responses["422"]
    if "requestBody" in operation or any(
        _can_be_refused(p.get("schema", {})) for p in operation.get("parameters", [])
    ):
        responses["422"] = {"description": _DESCRIPTIONS["422"], "content": _ERROR}


def _can_be_refused(schema: dict[str, Any]) -> bool:
    """Any value but a plain optional string can fail validation."""
    variants = [v for v in schema.get("anyOf", [schema]) if v.get("type") != "null"]
    loose = {"title", "description", "default"}
    return not (
        len(variants) == 1
        and variants[0].get("type") == "string"
        and set(variants[0]) - loose <= {"type"}
    )


def _declare_signed_callback(operation: dict[str, Any]) -> None:
    """Callbacks (and what is signed like them) carry a body of any type and may be
    signed the Standard Webhooks way: declared here once for every such route."""
    operation.setdefault("requestBody", _CALLBACK_BODY)
    # The route's pattern matches no line break: no correlation key holds one.
    _add(operation["responses"], 404, "No such route: a key holding a line break")
    parameters = operation.setdefault("parameters", [])
    for parameter in parameters:
        if parameter["name"] == "key" and parameter["in"] == "path":
            parameter.setdefault("description", "the job's correlation key")
    named = {(p["in"], p["name"].lower()) for p in parameters}
    for name, said in _SIGNATURE_HEADERS.items():
        if ("header", name) not in named:
            parameters.append(
                {
                    "name": name,
                    "in": "header",
                    "required": False,
                    "description": f"{said} (for a job type that requires signed callbacks)",
                    "schema": {"type": "string"},
                }
            )
