"""A token restricted to queues or job types may only submit, and only there."""

from __future__ import annotations

from tests.api.conftest import Api
from tests.auth.conftest import Tokens

# A job of type "typed", which goes to queue "bulk" (the tenant's).
TYPED_JOB = {"type": "typed", "payload": {"order_id": 7}}


def _tenant(tokens: Tokens) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens.tenant}"}


async def test_a_tenant_submits_to_its_own_queue_only(authed: Api, tokens: Tokens) -> None:
    own = await authed.client.post("/v1/jobs", json=TYPED_JOB, headers=_tenant(tokens))
    assert own.status_code == 201, own.text
    assert own.json()["queue"] == "bulk"
    # A type whose queue is another's is refused as a type, as an unknown one is.
    other = await authed.client.post("/v1/jobs", json={"type": "ok"}, headers=_tenant(tokens))
    assert other.status_code == 403
    assert other.json() == {
        "error": "forbidden",
        "field": "type",
        "message": "type: token 'tenant' may not submit jobs of type 'ok'",
        "errors": [{"field": "type", "message": "token 'tenant' may not submit jobs of type 'ok'"}],
    }
    moved = {**TYPED_JOB, "queue": "default"}
    queue = await authed.client.post("/v1/jobs", json=moved, headers=_tenant(tokens))
    assert (queue.status_code, queue.json()["message"]) == (
        403,
        "queue: token 'tenant' may not submit to queue 'default'",
    )
    assert await authed.count_jobs() == 1


async def test_a_batch_with_one_foreign_job_stores_nothing(authed: Api, tokens: Tokens) -> None:
    batch = {"jobs": [TYPED_JOB, {"type": "ok"}]}
    refused = await authed.client.post("/v1/jobs/batch", json=batch, headers=_tenant(tokens))
    assert refused.status_code == 403
    assert refused.json()["field"] == "jobs[1].type"
    assert await authed.count_jobs() == 0


async def test_a_tenant_cannot_read_or_operate(authed: Api, tokens: Tokens) -> None:
    # Reads are refused, not filtered: the inbox, the queues' counts and the metrics
    # span every tenant. The tenant holds read, the refusal says why.
    made = await authed.client.post("/v1/jobs", json=TYPED_JOB, headers=_tenant(tokens))
    job = made.json()
    for method, path in (
        ("GET", "/v1/jobs"),
        ("GET", f"/v1/jobs/{job['id']}"),
        ("GET", "/v1/queues/bulk"),
        ("GET", "/v1/responses"),
        ("GET", "/metrics"),
    ):
        refused = await authed.client.request(method, path, headers=_tenant(tokens))
        assert refused.status_code == 403, path
        assert "restricted" in refused.json()["message"]


async def test_a_tenant_sees_neither_other_job_types_nor_the_host(
    authed: Api, tokens: Tokens
) -> None:
    # An unknown type and another tenant's answer alike: neither can be listed.
    unknown = await authed.client.post("/v1/jobs", json={"type": "x"}, headers=_tenant(tokens))
    assert (unknown.status_code, unknown.json()["message"]) == (
        403,
        "type: token 'tenant' may not submit jobs of type 'x'",
    )
    ready = await authed.client.get("/readyz", headers=_tenant(tokens))
    assert "owner" not in ready.json()
