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


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/responses", "/v1/responses/parked"])
@pytest.mark.parametrize("cursor", ["99999999999999999999", "²", "abc", "-5", ""])
async def test_every_listing_refuses_a_cursor_it_did_not_return(
    api: Api, path: str, cursor: str
) -> None:
    answer = await api.client.get(path, params={"cursor": cursor})
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["error"] == "invalid_request", error
    assert error["field"] == "cursor", error
    assert error["message"] == "cursor: not a cursor returned by this API", error


async def test_a_match_by_hand_is_refused_where_no_job_type_takes_responses(api: Api) -> None:
    # Every job type of this service runs a python handler: no loop matches responses,
    # so a match would be stored and never settle the job.
    r = await api.client.post("/v1/responses/1/match", json={"job_id": 1})
    assert r.status_code == 409
    assert r.json()["field"] == "job_id"
    assert "complete" in r.json()["message"]
