"""PooledTransport against real uvicorn servers on 127.0.0.1.

The peer is a Starlette app whose routes record what a user of the pool would check:
the client port each request came from (one port per connection) and how many
requests it was serving at once. Slow routes wait on an event that the fixture sets
on teardown, so that no request outlives its server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from hipq.transports.http_pool import PooledTransport
from tests.peers import free_port, serve_app

BIG = bytes(range(256)) * 4096  # 1 MiB


class Peer:
    def __init__(self) -> None:
        self.ports: list[int] = []  # client port of every request, in arrival order
        self.in_flight = 0
        self.max_in_flight = 0
        self.slow_arrived = asyncio.Event()
        self.release = asyncio.Event()  # ends every slow request
        self.app = Starlette(
            routes=[
                Route("/port", self.port),
                Route("/slow", self.slow),
                Route("/close", self.close),
                Route("/big", self.big),
            ]
        )

    def _record(self, request: Request) -> int:
        assert request.client is not None
        self.ports.append(request.client.port)
        return request.client.port

    async def port(self, request: Request) -> Response:
        return PlainTextResponse(str(self._record(request)))

    async def slow(self, request: Request) -> Response:
        """Waits ``?delay=`` seconds (default: until released), counting requests at once."""
        self._record(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.slow_arrived.set()
        try:
            with contextlib.suppress(TimeoutError):
                delay = float(request.query_params.get("delay", "30"))
                await asyncio.wait_for(self.release.wait(), delay)
        finally:
            self.in_flight -= 1
        return PlainTextResponse("slow")

    async def close(self, request: Request) -> Response:
        return PlainTextResponse(str(self._record(request)), headers={"connection": "close"})

    async def big(self, request: Request) -> Response:
        self._record(request)

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(BIG), 64 * 1024):
                yield BIG[start : start + 64 * 1024]

        return StreamingResponse(chunks(), media_type="application/octet-stream")


@pytest.fixture
async def peer() -> AsyncIterator[tuple[Peer, str]]:
    peer = Peer()
    try:
        async with serve_app(peer.app) as url:
            try:
                yield peer, url
            finally:
                peer.release.set()
    finally:
        peer.release.set()


@contextlib.asynccontextmanager
async def client_for(transport: PooledTransport, **kwargs: Any) -> AsyncIterator[httpx.AsyncClient]:
    client = httpx.AsyncClient(transport=transport, **{"timeout": 5, **kwargs})
    try:
        yield client
    finally:
        await client.aclose()


# -- reuse and the limit ------------------------------------------------------------


async def test_sequential_requests_reuse_one_connection(peer: tuple[Peer, str]) -> None:
    server, url = peer
    transport = PooledTransport(4)
    most_open = 0
    async with client_for(transport) as client:
        for _ in range(200):
            response = await client.get(f"{url}/port")
            assert response.status_code == 200
            most_open = max(most_open, transport.open_connections)
        assert transport.open_connections == 1
    assert len(server.ports) == 200
    assert len(set(server.ports)) <= 2
    assert most_open <= 2


async def test_requests_in_flight_never_exceed_the_limit(peer: tuple[Peer, str]) -> None:
    server, url = peer
    transport = PooledTransport(5)
    async with client_for(transport) as client:
        responses = await asyncio.wait_for(
            asyncio.gather(*(client.get(f"{url}/slow?delay=0.05") for _ in range(50))), 10
        )
        assert transport.open_connections <= 5
    assert [r.status_code for r in responses] == [200] * 50
    assert all(r.text == "slow" for r in responses)
    assert len(server.ports) == 50
    assert server.max_in_flight == 5
    # The connections were kept and reused across the ten rounds.
    assert len(set(server.ports)) <= 5


# -- connections the server ends ----------------------------------------------------


async def test_connection_close_from_the_server_does_not_break_later_requests(
    peer: tuple[Peer, str],
) -> None:
    server, url = peer
    transport = PooledTransport(2)
    async with client_for(transport) as client:
        for _ in range(10):
            response = await client.get(f"{url}/close")
            assert response.status_code == 200
            assert response.headers["connection"] == "close"
            # A connection the server closes is not kept.
            assert transport.open_connections == 0
        # ...and a keep-alive route afterwards is served normally.
        assert (await client.get(f"{url}/port")).status_code == 200
    assert len(set(server.ports)) == 11  # a new connection each time


async def test_idle_connection_closed_by_the_server_is_not_reused() -> None:
    server = Peer()
    transport = PooledTransport(4)  # its own keep-alive (5 s) is far longer than the server's
    async with (
        serve_app(server.app, timeout_keep_alive=0.1) as url,
        client_for(transport) as client,
    ):
        first = await client.get(f"{url}/port")
        assert first.status_code == 200
        assert transport.open_connections == 1
        await asyncio.sleep(0.4)  # the server closes the idle connection meanwhile
        second = await client.get(f"{url}/port")
        assert second.status_code == 200
        assert second.text != first.text  # a new connection, from another port
        assert transport.open_connections == 1  # the dead one was dropped, not kept
        third = await client.get(f"{url}/port")
        assert third.text == second.text


# -- errors as httpx exceptions -----------------------------------------------------


async def test_connect_to_a_closed_port_raises_connect_error() -> None:
    transport = PooledTransport(2)
    async with client_for(transport) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{free_port()}/")
        assert transport.open_connections == 0


async def test_slow_response_raises_read_timeout_and_frees_the_slot(
    peer: tuple[Peer, str],
) -> None:
    _, url = peer
    transport = PooledTransport(1)
    async with client_for(transport, timeout=httpx.Timeout(5, read=0.2)) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(f"{url}/slow")
        assert transport.open_connections == 0
        # The only slot is free again.
        response = await asyncio.wait_for(client.get(f"{url}/port"), 3)
        assert response.status_code == 200


async def test_no_free_slot_within_the_pool_timeout_raises_pool_timeout(
    peer: tuple[Peer, str],
) -> None:
    server, url = peer
    transport = PooledTransport(1)
    async with client_for(transport, timeout=httpx.Timeout(5, pool=0.2)) as client:
        slow = asyncio.create_task(client.get(f"{url}/slow"))
        try:
            await asyncio.wait_for(server.slow_arrived.wait(), 3)
            with pytest.raises(httpx.PoolTimeout):
                await client.get(f"{url}/port")
            assert len(server.ports) == 1  # the second request never reached the server
            server.release.set()
            assert (await asyncio.wait_for(slow, 3)).status_code == 200
            # With the slot back, requests go through again.
            assert (await client.get(f"{url}/port")).status_code == 200
        finally:
            slow.cancel()
            await asyncio.gather(slow, return_exceptions=True)


async def test_unsupported_scheme_raises_unsupported_protocol() -> None:
    transport = PooledTransport(1)
    async with client_for(transport) as client:
        with pytest.raises(httpx.UnsupportedProtocol):
            await client.get("ftp://127.0.0.1/file")
    # The transport itself, without the client's checks in between.
    with pytest.raises(httpx.UnsupportedProtocol):
        await PooledTransport(1).handle_async_request(httpx.Request("GET", "ftp://127.0.0.1/file"))


# -- cancellation, streaming, closing -----------------------------------------------


async def test_cancelled_request_gives_its_slot_back(peer: tuple[Peer, str]) -> None:
    server, url = peer
    transport = PooledTransport(1)
    async with client_for(transport) as client:
        slow = asyncio.create_task(client.get(f"{url}/slow"))
        await asyncio.wait_for(server.slow_arrived.wait(), 3)
        slow.cancel()
        [outcome] = await asyncio.wait_for(asyncio.gather(slow, return_exceptions=True), 3)
        assert isinstance(outcome, asyncio.CancelledError)
        # The half-used connection is dropped, not handed to the next request.
        assert transport.open_connections == 0
        response = await asyncio.wait_for(client.get(f"{url}/port"), 3)
        assert response.status_code == 200
        assert int(response.text) != server.ports[0]


async def test_streamed_body_arrives_whole_and_the_connection_is_reused(
    peer: tuple[Peer, str],
) -> None:
    server, url = peer
    transport = PooledTransport(2)
    async with client_for(transport) as client:
        received = bytearray()
        async with client.stream("GET", f"{url}/big") as response:
            assert response.status_code == 200
            async for part in response.aiter_bytes():
                received += part
        assert len(received) == len(BIG)
        assert bytes(received) == BIG
        assert transport.open_connections == 1
        after = await client.get(f"{url}/port")
        assert int(after.text) == server.ports[0]  # the same connection as the stream


async def test_aclose_closes_idle_connections_and_later_requests_raise(
    peer: tuple[Peer, str],
) -> None:
    _, url = peer
    transport = PooledTransport(4)
    async with client_for(transport) as client:
        await asyncio.gather(*(client.get(f"{url}/slow?delay=0.02") for _ in range(3)))
        assert transport.open_connections == 3
        await transport.aclose()
        assert transport.open_connections == 0
        with pytest.raises(RuntimeError, match="closed"):
            await client.get(f"{url}/port")
        assert transport.open_connections == 0


async def test_idle_connections_to_one_server_do_not_block_reuse_for_another() -> None:
    a, b = Peer(), Peer()
    async with serve_app(a.app) as url_a, serve_app(b.app) as url_b:
        transport = PooledTransport(4, max_idle=2, keepalive_expiry=0.1)
        async with httpx.AsyncClient(transport=transport) as client:
            # Two connections to A go idle and fill the idle limit, then expire.
            await asyncio.gather(*(client.get(f"{url_a}/port") for _ in range(2)))
            await asyncio.sleep(0.3)
            for _ in range(5):
                (await client.get(f"{url_b}/port")).raise_for_status()
            # B's requests share one kept-alive connection; A's dead ones were closed.
            assert len(set(b.ports)) == 1
            assert transport.open_connections == 1


async def test_a_request_waiting_for_a_slot_when_the_transport_closes_fails(
    peer: tuple[Peer, str],
) -> None:
    state, url = peer
    transport = PooledTransport(1)
    client = httpx.AsyncClient(transport=transport)
    slow = asyncio.create_task(client.get(f"{url}/slow"))
    await asyncio.wait_for(state.slow_arrived.wait(), 5)
    waiting = asyncio.create_task(client.get(f"{url}/port"))
    await asyncio.sleep(0.05)
    await transport.aclose()
    state.release.set()
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.wait_for(waiting, 5)
    await asyncio.gather(slow, return_exceptions=True)
    assert transport.open_connections == 0
    assert len(state.ports) == 1  # the waiting request never reached the server


# -- TLS ------------------------------------------------------------------------------


async def test_https_verifies_the_server_against_the_trusted_authorities(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    key_file, chain_file = tmp_path / "key.pem", tmp_path / "chain.pem"
    cert.private_key_pem.write_to_path(key_file)
    cert.cert_chain_pems[0].write_to_path(chain_file)
    peer = Peer()
    async with serve_app(peer.app, ssl_keyfile=str(key_file), ssl_certfile=str(chain_file)) as url:
        https = url.replace("http://", "https://")
        trusting = ssl.create_default_context()
        ca.configure_trust(trusting)
        transport = PooledTransport(2, ssl_context=trusting)
        async with client_for(transport) as client:
            ports = {(await client.get(f"{https}/port")).text for _ in range(3)}
            assert len(ports) == 1  # one TLS connection, kept alive
        # The default authorities do not know this one: the handshake is refused.
        async with client_for(PooledTransport(2)) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(f"{https}/port")
