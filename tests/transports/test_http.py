"""The http transport against a real HTTP server on 127.0.0.1.

The server is a small asyncio HTTP/1.1 responder that records every request and
answers by the first path segment (``/ok``, ``/fail``, ``/busy``...). What the
transport reports goes to a recording Reporter, the loop's seam; the last tests
run the real service loop to show the states a user sees.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hipq.config import ConfigError, JobTypeConfig, load_settings
from hipq.job_types import JobTypeInfo
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.outcomes import Succeeded
from hipq.service import Service
from hipq.transports.http import HttpTransport
from hipq.transports.rendering import RequestTemplateError
from tests.factories import make_job
from tests.support import FakeClock, Recorder, eventually, make_settings

CALLBACK_BASE = "http://hipq.test:8000"
HTTP_DATE = "Wed, 07 Jan 2026 08:00:00 GMT"

# --- the peer --------------------------------------------------------------------------


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _reply(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    reasons = {
        200: "OK",
        202: "Accepted",
        302: "Found",
        404: "Not Found",
        422: "Unprocessable",
        429: "Too Many Requests",
        500: "Internal Server Error",
        503: "Unavailable",
    }
    head = [
        f"HTTP/1.1 {status} {reasons.get(status, 'X')}",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    head += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


_JSON = {"content-type": "application/json"}
ANSWERS: dict[str, bytes] = {
    "ok": _reply(202, b'{"accepted": true}', _JSON),
    "fail": _reply(500, b'{"error": "boom"}', _JSON),
    "busy": _reply(429, b"slow down", {"retry-after": "7"}),
    "busy-date": _reply(503, b"", {"retry-after": HTTP_DATE}),
    "busy-long": _reply(429, b"", {"retry-after": "120"}),
    "missing": _reply(404, b"no such thing"),
    "invalid": _reply(422, b'{"error": "bad amount"}', _JSON),
    "redirect": _reply(302, b"", {"location": "/ok/elsewhere"}),
    "result": _reply(200, b'{"status": "ok", "total": 5}', _JSON),
    "declined": _reply(200, b'{"status": "declined"}', _JSON),
    "text": _reply(200, b"plain words"),
    "huge": _reply(200, b"x" * 5000),
    "cookie": _reply(202, b"", {"set-cookie": "session=tenant-a; Path=/"}),
}


@dataclass
class Peer:
    """Records requests; answers by the first path segment."""

    seen: list[Seen] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, _version = head[0].split(" ", 2)
            headers = {}
            for line in head[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.seen.append(Seen(method, target, headers, body))
            await self._answer(target.split("?")[0].split("/")[1], writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()

    async def _answer(self, what: str, writer: asyncio.StreamWriter) -> None:
        if what == "slow":
            await asyncio.sleep(30)
        elif what == "huge-chunked":
            # No Content-Length: only counting while streaming can find the size.
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for _ in range(40):
                writer.write(b"%x\r\n%s\r\n" % (1000, b"y" * 1000))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(ANSWERS[what])
        await writer.drain()


@pytest.fixture
async def peer() -> AsyncIterator[Peer]:
    p = Peer()
    await p.start()
    yield p
    await p.stop()


# --- the transport ---------------------------------------------------------------------


def info(name: str = "charge", outcome: dict | None = None, **http: Any) -> JobTypeInfo:
    config = JobTypeConfig.model_validate(
        {"transport": {"http": http}, "outcome": outcome, "timeout": "1h"}
    )
    return JobTypeInfo(name, config, None)


def job(type: str = "charge", **changes: Any) -> Job:
    fields: dict[str, Any] = dict(
        id=7,
        type=type,
        payload={"order_id": "A-17", "amount": 1200, "items": [{"sku": "s1", "qty": 2}]},
        labels={"tenant": "acme"},
        timeout_seconds=3600.0,
        correlation_key="A 17/x",
    )
    fields.update(changes)
    return make_job(**fields)


@pytest.fixture
async def transports() -> AsyncIterator[Any]:
    made: list[HttpTransport] = []

    async def build(*infos: JobTypeInfo, clock: FakeClock | None = None) -> HttpTransport:
        t = HttpTransport({i.name: i for i in infos}, CALLBACK_BASE, clock or FakeClock())
        await t.start()
        made.append(t)
        return t

    yield build
    for t in made:
        await t.stop()


async def send(transport: HttpTransport, j: Job | None = None) -> Recorder:
    rec = Recorder()
    transport.dispatch(j or job(), rec)
    return rec


async def test_sends_the_rendered_request_with_the_callback_url_then_reports_sent(
    peer: Peer, transports: Any
) -> None:
    t = await transports(
        info(
            url=f"{peer.base}/ok/{{payload.order_id}}?attempt={{attempt}}",
            method="PUT",
            headers={"Authorization": "Bearer {labels.tenant}", "X-Static": "yes"},
            body={
                "order": "{payload.order_id}",
                "amount": "{payload.amount}",
                "items": "{payload.items}",
                "ref": "order {payload.order_id}",
                "kind": "charge",
            },
        )
    )
    rec = await send(t)
    assert await rec.one() == ("sent", None)
    [req] = peer.seen
    callback = f"{CALLBACK_BASE}/v1/callbacks/A%2017%2Fx?type=charge"
    assert (req.method, req.target) == ("PUT", "/ok/A-17?attempt=1")
    assert req.headers["authorization"] == "Bearer acme"
    assert req.headers["x-static"] == "yes"
    assert req.headers["x-callback-url"] == callback
    assert req.headers["content-type"] == "application/json"
    assert req.json() == {
        "order": "A-17",
        "amount": 1200,
        "items": [{"sku": "s1", "qty": 2}],
        "ref": "order A-17",
        "kind": "charge",
        "callback_url": callback,
    }


async def test_without_a_body_template_the_payload_is_the_body(peer: Peer, transports: Any) -> None:
    t = await transports(
        info(url=f"{peer.base}/ok", callback_header=None, callback_field="reply_to")
    )
    rec = await send(t)
    assert await rec.one() == ("sent", None)
    [req] = peer.seen
    assert req.json() == {
        "order_id": "A-17",
        "amount": 1200,
        "items": [{"sku": "s1", "qty": 2}],
        "reply_to": f"{CALLBACK_BASE}/v1/callbacks/A%2017%2Fx?type=charge",
    }
    assert "x-callback-url" not in req.headers


async def test_a_get_request_carries_no_body_and_the_callback_url_in_its_header(
    peer: Peer, transports: Any
) -> None:
    t = await transports(info(url=f"{peer.base}/ok/{{payload.order_id}}", method="get"))
    assert await (await send(t)).one() == ("sent", None)
    [req] = peer.seen
    assert (req.method, req.target, req.body) == ("GET", "/ok/A-17", b"")
    assert req.headers["x-callback-url"] == f"{CALLBACK_BASE}/v1/callbacks/A%2017%2Fx?type=charge"


async def test_a_job_without_a_correlation_key_fails_for_good_without_a_request(
    peer: Peer, transports: Any
) -> None:
    t = await transports(info(url=f"{peer.base}/ok"))
    failed = await (await send(t, job(correlation_key=None))).failure()
    assert not failed.error.retryable
    assert "no correlation key" in failed.error.message
    assert peer.seen == []


async def test_a_payload_that_cannot_fill_the_template_fails_for_good(
    peer: Peer, transports: Any
) -> None:
    t = await transports(info(url=f"{peer.base}/ok", body={"x": "{payload.missing}"}))
    failed = await (await send(t)).failure()
    assert not failed.error.retryable
    assert failed.error.message == "request template: payload.missing is missing"
    assert peer.seen == []


async def test_server_errors_are_retryable_failures_with_the_response_kept(
    peer: Peer, transports: Any
) -> None:
    t = await transports(info(url=f"{peer.base}/fail/{{payload.order_id}}?token=secret"))
    failed = await (await send(t)).failure()
    assert failed.error.retryable and failed.error.kind == "http"
    assert failed.error.retry_after is None
    # The query (it may carry tokens) stays out of the message.
    assert failed.error.message == f"HTTP 500 from {peer.base}/fail/A-17"
    assert failed.response == {"status": 500, "body": {"error": "boom"}}


async def test_429_honours_retry_after_seconds(peer: Peer, transports: Any) -> None:
    clock = FakeClock()
    t = await transports(info(url=f"{peer.base}/busy"), clock=clock)
    failed = await (await send(t)).failure()
    assert failed.error.retryable
    assert failed.error.retry_after == clock.now + timedelta(seconds=7)
    assert failed.response == {"status": 429, "body": "slow down"}


async def test_503_honours_retry_after_as_an_http_date(peer: Peer, transports: Any) -> None:
    t = await transports(info(url=f"{peer.base}/busy-date"))
    failed = await (await send(t)).failure()
    assert failed.error.retryable
    assert failed.error.retry_after == datetime(2026, 1, 7, 8, 0, tzinfo=UTC)


async def test_4xx_are_retried_unless_the_job_type_lists_them(peer: Peer, transports: Any) -> None:
    t = await transports(
        info("listed", url=f"{peer.base}/missing", non_retryable_statuses=[404, 410]),
        info("unlisted", url=f"{peer.base}/invalid", non_retryable_statuses=[404]),
    )
    listed = await (await send(t, job("listed"))).failure()
    unlisted = await (await send(t, job("unlisted", id=8))).failure()
    assert not listed.error.retryable
    assert listed.error.message == f"HTTP 404 from {peer.base}/missing"
    assert unlisted.error.retryable
    assert unlisted.response == {"status": 422, "body": {"error": "bad amount"}}


async def test_redirects_are_not_followed(peer: Peer, transports: Any) -> None:
    t = await transports(info(url=f"{peer.base}/redirect"))
    failed = await (await send(t)).failure()
    assert [s.target for s in peer.seen] == ["/redirect"]
    assert failed.error.retryable
    assert "HTTP 302" in failed.error.message
    assert "redirect to /ok/elsewhere not followed" in failed.error.message


async def test_a_cookie_one_target_sets_is_not_sent_with_the_next_job(
    peer: Peer, transports: Any
) -> None:
    t = await transports(info(url=f"{peer.base}/cookie"))
    assert await (await send(t, job(id=1))).one() == ("sent", None)
    assert await (await send(t, job(id=2))).one() == ("sent", None)
    assert len(peer.seen) == 2
    assert all("cookie" not in s.headers for s in peer.seen)


@pytest.mark.parametrize("path", ["huge", "huge-chunked"])
async def test_a_response_body_over_the_cap_fails_the_attempt(
    peer: Peer, transports: Any, path: str
) -> None:
    t = await transports(info(url=f"{peer.base}/{path}", callback=False, max_response_bytes=1000))
    failed = await (await send(t)).failure()
    assert failed.error.retryable
    assert failed.error.message == f"response body over 1000 bytes from {peer.base}/{path}"


async def test_a_peer_slower_than_the_timeout_is_a_retryable_failure(
    peer: Peer, transports: Any
) -> None:
    t = await transports(info(url=f"{peer.base}/slow", timeout="300ms"))
    started = asyncio.get_running_loop().time()
    failed = await (await send(t)).failure()
    assert asyncio.get_running_loop().time() - started < 3
    assert failed.error.retryable
    assert failed.error.message == f"no response from {peer.base}/slow within 0.3s"


async def test_connection_refused_is_a_retryable_failure(transports: Any) -> None:
    with socket.socket() as s:  # a port that nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = await transports(info(url=f"http://127.0.0.1:{port}/ok"))
    failed = await (await send(t)).failure()
    assert failed.error.retryable and failed.error.kind == "http"
    assert failed.error.message.startswith(f"cannot connect to http://127.0.0.1:{port}/ok")


async def test_synchronous_mode_takes_the_response_as_the_result(
    peer: Peer, transports: Any
) -> None:
    t = await transports(
        info(
            "ruled",
            url=f"{peer.base}/result",
            callback=False,
            outcome={"field": "status", "success": ["ok"]},
        ),
        info(
            "declined",
            url=f"{peer.base}/declined",
            callback=False,
            outcome={"field": "status", "success": ["ok"]},
        ),
        info("anything", url=f"{peer.base}/text", callback=False),
    )
    assert await (await send(t, job("ruled"))).one() == (
        "outcome",
        Succeeded({"status": "ok", "total": 5}),
    )
    declined = await (await send(t, job("declined", id=8))).failure()
    assert declined.error.kind == "response"
    assert declined.error.message == "status='declined' is not one of ok"
    assert declined.response == {"status": "declined"}
    # No outcome rule: any 2xx is a success, and a body that is not JSON is kept as text.
    assert await (await send(t, job("anything", id=9))).one() == (
        "outcome",
        Succeeded("plain words"),
    )
    # No callback in synchronous mode: nothing will call back.
    assert all("x-callback-url" not in s.headers for s in peer.seen)
    assert all("callback_url" not in s.json() for s in peer.seen)


async def test_abandon_cancels_a_request_in_flight(peer: Peer, transports: Any) -> None:
    t = await transports(info(url=f"{peer.base}/slow", timeout="10s"))
    rec = await send(t)
    await eventually(lambda: peer.seen)
    assert t.busy == 1
    t.abandon(7)
    await eventually(lambda: t.busy == 0)
    await asyncio.sleep(0.1)
    assert rec.calls == []


def test_a_bad_template_fails_at_construction_naming_the_job_type_key() -> None:
    with pytest.raises(RequestTemplateError, match=r"job_types\.charge\.transport\.http\.url: "):
        HttpTransport({"charge": info(url="http://x/{paylod.id}")}, CALLBACK_BASE, FakeClock())
    with pytest.raises(RequestTemplateError, match=r"job_types\.charge\.transport\.http\.url: "):
        HttpTransport({"charge": info(url="{payload.url}")}, CALLBACK_BASE, FakeClock())
    with pytest.raises(RequestTemplateError, match=r"job_types\.charge\.transport\.http\.body"):
        HttpTransport(
            {"charge": info(url="http://x/", body={"a": "{id"})}, CALLBACK_BASE, FakeClock()
        )
    with pytest.raises(RequestTemplateError, match=r"job_types\.charge\.outcome: "):
        HttpTransport(
            {"charge": info(url="http://x/", outcome={"field": "s", "bogus": 1})},
            CALLBACK_BASE,
            FakeClock(),
        )


# --- through the service's loop ------------------------------------------------------


async def test_through_the_loop_a_2xx_awaits_the_callback_and_sync_mode_completes(
    database_url: str, peer: Peer
) -> None:
    retry = {"strategy": "fixed", "delay": "10s", "max_attempts": 3}
    settings = make_settings(
        database_url,
        job_types={
            "charge": {
                "correlation_key": "{payload.order_id}",
                "retry": retry,
                "transport": {"http": {"url": f"{peer.base}/ok"}},
            },
            "quote": {
                "retry": retry,
                "transport": {"http": {"url": f"{peer.base}/result", "callback": False}},
                "outcome": {"field": "status", "success": ["ok"]},
            },
            "flaky": {
                "correlation_key": "{payload.order_id}",
                "retry": retry,
                "transport": {"http": {"url": f"{peer.base}/busy-long"}},
            },
        },
    )
    clock = FakeClock()
    svc = Service(settings, clock=clock, run_loops=False)
    await svc.start()
    try:
        loop = svc.loops["default"]
        assert await loop.acquire()
        added = {}
        for type_ in ("charge", "quote", "flaky"):
            new = svc.intake.resolve(
                {"type": type_, "payload": {"order_id": f"{type_}-1"}}, clock()
            )
            [added[type_]] = (await svc.store.job_insert_many([new], clock())).jobs

        async def states() -> dict[str, State]:
            await loop.run_once()
            return {k: (await svc.store.job_get(j.id)).state for k, j in added.items()}

        await eventually(
            lambda: _expect(
                states(),
                {"charge": State.AWAITING, "quote": State.COMPLETED, "flaky": State.SCHEDULED},
            )
        )
        quote = await svc.store.job_get(added["quote"].id)
        assert quote.result == {"status": "ok", "total": 5}
        flaky = await svc.store.job_get(added["flaky"].id)
        # The peer's Retry-After (120 s) wins over the strategy's fixed 10 s.
        assert flaky.run_at == clock.now + timedelta(seconds=120)
        assert flaky.last_error == f"HTTP 429 from {peer.base}/busy-long"
        charge = next(s for s in peer.seen if s.target == "/ok")
        assert charge.json()["callback_url"].endswith("/v1/callbacks/charge-1?type=charge")
    finally:
        await svc.stop()


async def _expect(states: Any, wanted: dict[str, State]) -> bool:
    return await states == wanted


async def test_secrets_come_from_the_environment_not_the_config_file(
    peer: Peer, transports: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token in a request header and a webhook secret, kept out of the YAML file."""
    config = tmp_path / "hipq.yaml"
    config.write_text(
        "job_types:\n"
        "  charge_card:\n"
        "    correlation_key: '{payload.order_id}'\n"
        "    transport:\n"
        f"      http: {{url: '{peer.base}/ok', headers: {{x-static: 'yes'}}}}\n"
    )
    prefix = "HIPQ_JOB_TYPES__CHARGE_CARD__"
    monkeypatch.setenv(prefix + "TRANSPORT__HTTP__HEADERS__AUTHORIZATION", "Bearer from-env")
    monkeypatch.setenv(prefix + "CALLBACK_SIGNATURE__SECRET", "whsec_" + "QUJD" * 8)
    settings = load_settings(config)
    assert set(settings.job_types["charge_card"].transport.http.headers) == {  # type: ignore[union-attr]
        "x-static",
        "authorization",
    }
    # Header names with a hyphen: one JSON object, merged with the file's headers.
    monkeypatch.delenv(prefix + "TRANSPORT__HTTP__HEADERS__AUTHORIZATION")
    monkeypatch.setenv(
        prefix + "TRANSPORT__HTTP__HEADERS",
        '{"Authorization": "Bearer from-env", "X-Api-Key": "key-from-env"}',
    )
    settings = load_settings(config)
    charge = settings.job_types["charge_card"]
    assert charge.callback_signature is not None
    assert charge.callback_signature.secret == "whsec_" + "QUJD" * 8
    t = await transports(JobTypeInfo("charge_card", charge, None))
    rec = await send(t, job("charge_card"))
    assert await rec.one() == ("sent", None)
    [seen] = peer.seen
    assert (seen.headers["authorization"], seen.headers["x-static"]) == ("Bearer from-env", "yes")
    assert seen.headers["x-api-key"] == "key-from-env"

    # A misspelt variable is refused at start, naming the key, like a misspelt YAML key.
    monkeypatch.setenv(prefix + "TRANSPORT__HTTP__HEADRS__AUTHORIZATION", "Bearer x")
    with pytest.raises(ConfigError, match=r"^config error: job_types\.charge_card\.transport"):
        load_settings(config)
