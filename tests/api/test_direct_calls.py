"""JSON-body routes called without FastAPI's per-request solving (hipq.api.direct_calls)
answer as FastAPI did: the same values reach the endpoint, and a refused parameter
gets FastAPI's 422 naming it, with nothing stored."""

from __future__ import annotations

from tests.api.conftest import Api


async def test_a_key_longer_than_its_bound_is_refused_naming_the_header(api: Api) -> None:
    answer = await api.client.post(
        "/v1/jobs", json={"type": "ok"}, headers={"Idempotency-Key": "k" * 301}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "Idempotency-Key"
    assert await api.count_jobs() == 0


async def test_the_key_reaches_the_endpoint_and_a_repeat_is_replayed(api: Api) -> None:
    sent = {"json": {"type": "ok", "payload": {"a": 1}}, "headers": {"Idempotency-Key": "k1"}}
    first = await api.client.post("/v1/jobs", **sent)  # type: ignore[arg-type]
    again = await api.client.post("/v1/jobs", **sent)  # type: ignore[arg-type]
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"


async def test_a_body_that_is_no_job_is_refused_as_before(api: Api) -> None:
    for body, field in (([{"type": "ok"}], None), ({"type": "ok", "colour": "red"}, "colour")):
        answer = await api.client.post("/v1/jobs", json=body)
        assert answer.status_code == 422, answer.text
        assert answer.json()["field"] == field
    assert await api.count_jobs() == 0


async def test_a_verb_gets_its_path_parameter_and_its_body(api: Api) -> None:
    job = await api.post_job(type="ok")
    answer = await api.client.post(f"/v1/jobs/{job['id']}/cancel", json={"reason": "not needed"})
    assert answer.status_code == 200, answer.text
    assert (answer.json()["state"], answer.json()["last_error"]) == ("cancelled", "not needed")
    too_big = await api.client.post(f"/v1/jobs/{2**70}/cancel", json={"reason": "x"})
    assert too_big.status_code == 422
    assert too_big.json()["field"] == "job_id"
