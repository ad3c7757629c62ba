"""The OpenAPI schema is hipq's contract: the served schema is the committed openapi.json,
and it says what hipq answers (errors in hipq's shape, the guards' refusals, the callback's
body and signature headers, stable operation ids, a description on every field)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hipq.commands.main import app as cli
from tests.api.conftest import Api

COMMITTED = Path(__file__).resolve().parents[2] / "openapi.json"
REGENERATE = "hipq openapi > openapi.json"
ERROR_REF = "#/components/schemas/ErrorOut"


@pytest.fixture
async def schema(sqlite_api: Api) -> dict[str, Any]:
    response = await sqlite_api.client.get("/openapi.json")
    assert response.status_code == 200
    return response.json()


def _operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
    ]


async def test_the_served_schema_is_the_committed_one(schema: dict[str, Any]) -> None:
    committed = json.loads(COMMITTED.read_text())
    assert schema == committed, (
        f"the served OpenAPI schema differs from {COMMITTED.name}: run `{REGENERATE}` "
        "at the repository root and review the difference"
    )


def test_hipq_openapi_prints_the_committed_file() -> None:
    result = CliRunner().invoke(cli, ["openapi"])
    assert result.exit_code == 0, result.output
    assert result.output == COMMITTED.read_text(), f"run `{REGENERATE}`"


async def test_no_operation_advertises_fastapis_validation_error(schema: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in json.dumps(schema)
    assert "ValidationError" not in schema["components"]["schemas"]


async def test_every_error_is_declared_in_hipqs_shape(schema: dict[str, Any]) -> None:
    for method, path, op in _operations(schema):
        for status, response in op["responses"].items():
            if int(status) < 400 or (path, status) == ("/readyz", "503"):
                continue
            content = response.get("content", {})
            assert list(content) == ["application/json"], (method, path, status)
            assert content["application/json"]["schema"] == {"$ref": ERROR_REF}, (path, status)
            assert response["description"] not in ("", "Additional Response"), (path, status)


async def test_operation_ids_are_the_route_functions_names(schema: dict[str, Any]) -> None:
    ids = {(m, p): op["operationId"] for m, p, op in _operations(schema)}
    assert ids["POST", "/v1/jobs"] == "create_job"
    assert ids["GET", "/v1/jobs/{job_id}"] == "get_job"
    assert ids["POST", "/v1/queues/{name}/pause"] == "pause_queue"
    assert len(set(ids.values())) == len(ids)
    assert not [i for i in ids.values() if "_v1_" in i or i.endswith(("_get", "_post"))]


async def test_answers_beyond_the_errors_are_declared(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    cancel = paths["/v1/jobs/{job_id}/cancel"]["post"]["responses"]
    assert cancel["202"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobOut")
    ready = paths["/readyz"]["get"]["responses"]
    assert ready["503"]["content"]["application/json"]["schema"]["$ref"].endswith("/ReadyOut")
    callback = paths["/v1/callbacks/{key}"]["post"]
    assert set(callback["requestBody"]["content"]) == {"application/json", "text/plain"}
    headers = {p["name"] for p in callback["parameters"] if p["in"] == "header"}
    assert headers == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    metrics = paths["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]
    unavailable = paths["/v1/jobs"]["post"]["responses"]["503"]
    assert "Retry-After" in unavailable["headers"]


def _undescribed(name: str, model: dict[str, Any]) -> list[str]:
    return [
        f"{name}.{field}"
        for field, spec in model.get("properties", {}).items()
        if not spec.get("description")
    ]


async def test_every_field_has_a_description(schema: dict[str, Any]) -> None:
    missing = [
        field
        for name, model in schema["components"]["schemas"].items()
        for field in _undescribed(name, model)
    ]
    assert missing == []


async def test_every_parameter_has_a_description(schema: dict[str, Any]) -> None:
    missing = [
        (method, path, parameter["name"])
        for method, path, op in _operations(schema)
        for parameter in op.get("parameters", [])
        if not parameter.get("description")
    ]
    assert missing == []


async def test_the_guards_refusals_are_declared_where_they_apply(
    sqlite_api: Api, schema: dict[str, Any]
) -> None:
    """Each operation, sent from a foreign host, a foreign site or with a form body, is
    refused with a status its own declaration lists."""
    client = sqlite_api.client
    for method, path, op in _operations(schema):
        url = path.replace("{job_id}", "1").replace("{response_id}", "1")
        url = url.replace("{bulk_id}", "1").replace("{key}", "k").replace("{job_key}", "k")
        url = url.replace("{name}", "default")
        declared = set(op["responses"])
        foreign_host = await client.request(method, url, headers={"host": "evil.example"})
        if path not in ("/healthz", "/readyz"):
            assert foreign_host.status_code == 421, (method, path)
        assert str(foreign_host.status_code) in declared, (method, path)
        if method == "GET":
            continue
        foreign_site = await client.request(method, url, headers={"origin": "https://evil.example"})
        assert foreign_site.status_code == 403, (method, path)
        assert "403" in declared, (method, path)
        form = await client.request(
            method,
            url,
            content=b"a=1",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert str(form.status_code) in declared, (method, path, form.status_code)


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/jobs", {"type": "ok"}), ("/v1/jobs/batch", {"jobs": [{"type": "ok"}]})],
)
async def test_an_idempotent_replay_answers_what_the_schema_declares(
    sqlite_api: Api, schema: dict[str, Any], path: str, body: dict[str, Any]
) -> None:
    key = {"Idempotency-Key": f"replay-{path}"}
    first = await sqlite_api.client.post(path, json=body, headers=key)
    again = await sqlite_api.client.post(path, json=body, headers=key)
    assert (first.status_code, again.status_code) == (201, 200), again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    declared = schema["paths"][path]["post"]["responses"]
    assert "Idempotent-Replayed" in declared["200"]["headers"]
    assert declared["200"]["content"] == declared["201"]["content"]
