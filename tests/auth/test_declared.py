"""Deny by default: every route under /v1 declares its scope, in code and in OpenAPI."""

from __future__ import annotations

from fastapi.routing import RouteContext

from hipq.api.auth import route_requirement, routes
from tests.api.conftest import Api
from tests.auth.conftest import Tokens


def _v1_routes(api: Api) -> list[RouteContext]:
    app = api.client._transport.app  # type: ignore[attr-defined]
    return [r for r in routes(app) if (r.path or "").startswith("/v1/")]


async def test_every_v1_route_declares_a_scope(sqlite_authed: Api) -> None:
    routes = _v1_routes(sqlite_authed)
    assert len(routes) >= 15
    undeclared = [
        f"{sorted(r.methods or ())} {r.path}" for r in routes if route_requirement(r) is None
    ]
    assert not undeclared, f"routes without a declared scope: {undeclared}"


async def test_openapi_declares_the_scheme_scope_and_refusals(sqlite_authed: Api) -> None:
    schema = (await sqlite_authed.client.get("/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "A token from `hipq tokens new`, sent as `Authorization: Bearer <token>`.",
    }
    operations = [
        (path, method, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if path.startswith("/v1/") or path == "/metrics"
    ]
    assert len(operations) >= 16
    for path, method, op in operations:
        where = f"{method.upper()} {path}"
        assert {"bearer": []} in op.get("security", []), where
        assert "**Scope:** `" in op.get("description", ""), where
        for status in ("401", "403"):
            ref = op["responses"][status]["content"]["application/json"]["schema"]["$ref"]
            assert ref.endswith("/ErrorOut"), where
    for open_path in ("/healthz", "/readyz"):
        assert "security" not in schema["paths"][open_path]["get"]


async def test_an_undeclared_v1_route_needs_admin(sqlite_authed: Api, tokens: Tokens) -> None:
    # A route someone adds without a scope: refused to every scope but admin.
    app = sqlite_authed.client._transport.app  # type: ignore[attr-defined]

    async def undeclared() -> dict[str, str]:
        return {"reached": "yes"}

    app.add_api_route("/v1/undeclared", undeclared, methods=["GET"])
    client = sqlite_authed.client
    assert (await client.get("/v1/undeclared")).status_code == 401
    for scope in ("submit", "read", "operate", "callbacks"):
        refused = await client.get("/v1/undeclared", headers=tokens.header(scope))
        assert refused.status_code == 403, scope
    assert (await client.get("/v1/undeclared", headers=tokens.header("admin"))).json() == {
        "reached": "yes"
    }
    # ... and the schema says so, though the route declared nothing.
    app.openapi_schema = None
    operation = (await client.get("/openapi.json")).json()["paths"]["/v1/undeclared"]["get"]
    assert "**Scope:** `admin`" in operation["description"]
    assert operation["security"] == [{"bearer": []}]
    assert {"401", "403"} <= set(operation["responses"])
