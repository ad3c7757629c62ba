"""A browser on another site, a rebinding DNS name and a slow client, against the API."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.api.conftest import Api, api, open_api, sqlite_api, sqlite_url

__all__ = ["api", "sqlite_api", "sqlite_url"]  # the fixtures, imported for pytest

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


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("localhost:8000", "http://localhost:8001"),  # the same host, another port
        ("localhost:8000", "http://localhost"),
        ("localhost", "http://localhost:8080"),
        ("localhost:8000", "http://127.0.0.1:8000"),  # another allowed host
    ],
)
async def test_a_page_of_another_origin_on_an_allowed_host_is_refused(
    sqlite_api: Api, host: str, origin: str
) -> None:
    headers = {"host": host, "origin": origin}
    answer = await sqlite_api.client.post("/v1/queues/default/pause", json={}, headers=headers)
    assert answer.status_code == 403, answer.text
    assert answer.json()["field"] == "origin"
    assert (await sqlite_api.client.get("/v1/queues/default")).json()["paused"] is False


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("localhost:8000", "http://localhost:8000"),
        ("LOCALHOST:8000", "http://localhost:8000/"),
        ("localhost", "http://localhost:80"),
        ("localhost", "https://localhost"),  # TLS ended at a proxy
        ("[::1]:9000", "http://[::1]:9000"),
    ],
)
async def test_the_apis_own_origin_may_post(sqlite_api: Api, host: str, origin: str) -> None:
    headers = {"host": host, "origin": origin}
    answer = await sqlite_api.client.post("/v1/queues/default/pause", json={}, headers=headers)
    assert answer.status_code == 200, answer.text


async def test_a_listed_origin_is_compared_with_its_port(sqlite_url: str) -> None:
    server = {"allowed_origins": ["https://ops.example.com"]}
    async with open_api(sqlite_url, server=server) as api:
        for origin, status in (
            ("https://ops.example.com", 200),
            ("https://ops.example.com:443", 200),
            ("https://ops.example.com:8443", 403),
            ("http://ops.example.com", 403),
        ):
            answer = await api.client.post(
                "/v1/queues/default/pause", json={}, headers={"origin": origin}
            )
            assert answer.status_code == status, (origin, answer.text)


async def test_two_host_headers_are_refused(sqlite_api: Api) -> None:
    request = sqlite_api.client.build_request("GET", "/v1/queues")
    request.headers = httpx.Headers(
        [("host", "localhost"), ("host", "evil.example"), ("accept", "*/*")]
    )
    answer = await sqlite_api.client.send(request)
    assert answer.status_code == 400, answer.text
    assert answer.json()["field"] == "host"
    request = sqlite_api.client.build_request("GET", "/v1/queues")
    request.headers = httpx.Headers([("host", "evil.example"), ("host", "localhost")])
    assert (await sqlite_api.client.send(request)).status_code == 400
