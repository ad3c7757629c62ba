"""A browser on another site, a rebinding DNS name and a slow client, against the API."""

from __future__ import annotations

import asyncio

import pytest

from tests.api.conftest import Api, api, open_api

__all__ = ["api"]  # the fixture, imported for pytest

FORM = {"content-type": "application/x-www-form-urlencoded", "origin": "http://evil.example"}


async def test_a_cross_site_form_post_changes_nothing(api: Api) -> None:
    posted = await api.post_job(type="hang")
    pause = await api.client.post("/v1/queues/default/pause", content=b"", headers=FORM)
    cancel = await api.client.post(f"/v1/jobs/{posted['id']}/cancel", content=b"x=1", headers=FORM)
    for answer in (pause, cancel):
        assert answer.status_code == 403, answer.text
        assert answer.json()["field"] == "origin"
    assert (await api.client.get("/v1/queues/default")).json()["paused"] is False
    assert (await api.job(posted["id"]))["state"] == "scheduled"


async def test_a_form_body_without_an_origin_is_refused_as_not_json(api: Api) -> None:
    posted = await api.post_job(type="hang")
    form = {"content-type": "application/x-www-form-urlencoded"}
    answer = await api.client.post(f"/v1/jobs/{posted['id']}/cancel", content=b"", headers=form)
    assert answer.status_code == 415, answer.text
    assert answer.json()["field"] == "content-type"
    assert (await api.job(posted["id"]))["state"] == "scheduled"


@pytest.mark.parametrize(
    "origin", ["null", "http://[::1", "file://localhost", "http://evil.example"]
)
async def test_odd_origins_are_refused(api: Api, origin: str) -> None:
    answer = await api.client.post("/v1/queues/default/pause", json={}, headers={"origin": origin})
    assert answer.status_code == 403, answer.text
    assert (await api.client.get("/v1/queues/default")).json()["paused"] is False


async def test_a_same_origin_json_request_works(api: Api) -> None:
    headers = {"origin": "http://localhost"}
    answer = await api.client.post("/v1/queues/default/pause", json={}, headers=headers)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    "host", ["evil.example", "rebind.attacker.test:8000", "localhost.evil", "[::1", ""]
)
async def test_a_host_header_outside_the_allow_list_is_refused(api: Api, host: str) -> None:
    answer = await api.client.get("/v1/queues", headers={"host": host})
    assert answer.status_code == 421, answer.text
    assert answer.json()["field"] == "host"
    # Probes are answered: an orchestrator addresses the process by its IP.
    assert (await api.client.get("/healthz", headers={"host": host})).status_code == 200


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000"])
async def test_loopback_names_are_allowed_by_default(api: Api, host: str) -> None:
    assert (await api.client.get("/v1/queues", headers={"host": host})).status_code == 200


async def test_a_half_sent_body_is_cut_off_with_408(database_url: str) -> None:
    async with open_api(database_url, server={"body_read_timeout": "200ms"}) as api:
        gate = asyncio.Event()

        async def slow() -> object:
            yield b'{"type": "ok", '
            await gate.wait()  # never sends the rest
            yield b"}"

        try:
            answer = await api.client.post(
                "/v1/jobs", content=slow(), headers={"content-type": "application/json"}
            )
        finally:
            gate.set()
        assert answer.status_code == 408, answer.text
        assert answer.json()["error"] == "request_timeout"
        assert await api.count_jobs() == 0
