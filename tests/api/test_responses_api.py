"""Bad input to the responses inbox API: a 4xx naming the field, never a 500."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api

TOO_BIG = 2**63  # one past the largest id the databases store


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field"),
    [
        ("GET", "/v1/responses/0", None, 422, "response_id"),
        ("GET", f"/v1/responses/{TOO_BIG}", None, 422, "response_id"),
        ("GET", "/v1/responses/123", None, 404, None),
        ("POST", f"/v1/responses/{TOO_BIG}/match", {"job_id": 1}, 422, "response_id"),
        ("POST", "/v1/responses/1/match", {"job_id": TOO_BIG}, 422, "job_id"),
        ("POST", "/v1/responses/1/match", {"job_id": 0}, 422, "job_id"),
        ("POST", "/v1/responses/1/match", {"job": 1}, 422, "job_id"),
        ("GET", "/v1/responses?limit=0", None, 422, "limit"),
        ("GET", "/v1/responses?matched=maybe", None, 422, "matched"),
    ],
)
async def test_bad_ids_and_parameters_are_4xx_naming_the_field(
    api: Api, method: str, path: str, body: dict | None, status: int, field: str | None
) -> None:
    answer = await api.client.request(method, path, json=body)
    assert answer.status_code == status, answer.text
    if field is not None:
        assert field in {e["field"] for e in answer.json()["errors"]}, answer.text
