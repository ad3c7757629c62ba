"""Keys that a route must carry: a job_key reaches the by-key routes, a correlation key
its callback route. What no route could carry is refused (422 naming the field), on
both engines; everything accepted is reachable."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.api.conftest import Api


def _segment(key: str) -> str:
    return quote(key, safe="")  # as hipq's client and its callback URLs quote a key


@pytest.mark.parametrize("key", ["a\nb", "tab\there", "bell\x07", "del\x7f", "c1\x85", ".", ".."])
async def test_a_job_key_the_by_key_routes_cannot_carry_is_refused(api: Api, key: str) -> None:
    # A newline matches no by-key route (404 for ever); clients drop "." and "..".
    response = await api.client.post("/v1/jobs", json={"type": "ok", "job_key": key})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "job_key"
    batch = await api.client.post(
        "/v1/jobs/batch", json={"jobs": [{"type": "ok"}, {"type": "ok", "job_key": key}]}
    )
    assert batch.status_code == 422, batch.text
    assert batch.json()["field"].endswith("job_key")
    assert await api.count_jobs() == 0


@pytest.mark.parametrize(
    "key",
    ["x/cancel", "a/b", "a%2Fb", "?q", "#f", " sp ", "x/", "/x", "a/../b", "\u2028", "ü", "a\\b"],
)
async def test_every_job_key_accepted_is_reachable_by_key(api: Api, key: str) -> None:
    job = await api.post_job(type="ok", job_key=key, run_in="1h")
    found = await api.client.get(f"/v1/jobs/by-key/{_segment(key)}")
    assert found.status_code == 200, found.text
    assert found.json()["id"] == job["id"]
    cancelled = await api.client.post(f"/v1/jobs/by-key/{_segment(key)}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert (cancelled.json()["id"], cancelled.json()["state"]) == (job["id"], "cancelled")


@pytest.mark.parametrize("key", ["x/heartbeat", "a/b/heartbeat", "/heartbeat"])
async def test_a_correlation_key_ending_in_heartbeat_is_refused_given_or_built(
    api: Api, key: str
) -> None:
    # Its callback would reach POST /v1/callbacks/{key}/heartbeat: the job timed out.
    response = await api.client.post("/v1/jobs", json={"type": "ok", "correlation_key": key})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "correlation_key"
    assert "heartbeat" in response.json()["message"]
    typed = {"type": "typed", "payload": {"order_id": key}}  # its key: order-{payload.order_id}
    built = await api.client.post("/v1/jobs", json=typed)
    assert built.status_code == 422, built.text
    assert built.json()["field"] == "correlation_key"
    assert await api.count_jobs() == 0


@pytest.mark.parametrize("key", [".", ".."])
async def test_a_correlation_key_that_clients_drop_from_the_url_is_refused(
    api: Api, key: str
) -> None:
    response = await api.client.post("/v1/jobs", json={"type": "ok", "correlation_key": key})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "correlation_key"


@pytest.mark.parametrize("key", ["x/heartbeat/", "heartbeat", "x/heartbeats", "a/./b"])
async def test_a_correlation_key_near_those_is_accepted_and_its_callback_settles_it(
    api: Api, key: str
) -> None:
    job = await api.post_job(type="ok", correlation_key=key)
    callback = await api.client.post(f"/v1/callbacks/{_segment(key)}", json={"ok": True})
    assert callback.status_code == 202, callback.text
    stored = (await api.client.get("/v1/responses")).json()["responses"]
    assert [r["correlation_key"] for r in stored] == [key]
    assert job["correlation_key"] == key


async def test_a_schedule_whose_job_key_no_route_can_carry_is_refused(api: Api) -> None:
    schedule = {
        "name": "nightly",
        "cron": "0 2 * * *",
        "job": {"type": "ok", "job_key": "run\n{fire.date}"},
    }
    response = await api.client.post("/v1/schedules", json=schedule)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "job.job_key"
