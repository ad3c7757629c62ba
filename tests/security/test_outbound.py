"""Outbound requests probed as an attacker who controls a job's payload would: dot
segments in URL values, cookies carried from one job to the next, proxies, and
destinations outside a job type's allow-list."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import ValidationError

from hipq.config import JobTypeConfig
from tests.transports.test_http import ANSWERS, Peer, _reply, info, job, peer, send, transports

__all__ = ["peer", "transports"]  # the fixtures, imported for pytest

ANSWERS["set-cookie"] = _reply(200, b"{}", {"set-cookie": "session=from-job-1; Path=/"})


@pytest.mark.parametrize("value", ["..", "."])
async def test_a_dot_segment_in_a_url_value_is_refused(
    peer: Peer, transports: Any, value: str
) -> None:
    t = await transports(info(url=f"{peer.base}/ok/tenants/acme/items/{{payload.item}}"))
    failed = await (await send(t, job(payload={"item": value}))).failure()
    assert not failed.error.retryable
    assert "dot segment" in failed.error.message
    assert peer.seen == []


async def test_other_dots_are_sent_percent_encoded_in_place(peer: Peer, transports: Any) -> None:
    t = await transports(info(url=f"{peer.base}/ok/items/{{payload.item}}"))
    assert (await (await send(t, job(payload={"item": "../.."}))).one())[0] == "sent"
    assert [s.target for s in peer.seen] == ["/ok/items/..%2F.."]


async def test_a_cookie_set_for_one_job_is_not_sent_with_the_next(
    peer: Peer, transports: Any
) -> None:
    first = info("setter", url=f"{peer.base}/set-cookie", callback=False)
    other = info("other", url=f"{peer.base}/ok")
    t = await transports(first, other)
    for j in (job("setter"), job("setter", id=8), job("other", id=9)):
        await (await send(t, j)).one()
    assert [s.headers.get("cookie") for s in peer.seen] == [None, None, None]


async def test_a_job_type_that_keeps_cookies_keeps_them_to_itself(
    peer: Peer, transports: Any
) -> None:
    keeper = info("keeper", url=f"{peer.base}/set-cookie", callback=False, keep_cookies=True)
    other = info("other", url=f"{peer.base}/ok")
    t = await transports(keeper, other)
    for j in (job("keeper"), job("keeper", id=8), job("other", id=9)):
        await (await send(t, j)).one()
    assert [s.headers.get("cookie") for s in peer.seen] == [None, "session=from-job-1", None]


@pytest.fixture
async def proxy(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Peer]:
    p = Peer()
    await p.start()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, p.base)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    yield p
    await p.stop()


async def test_proxy_variables_are_not_used_as_docs_operations_says(
    peer: Peer, proxy: Peer, transports: Any
) -> None:
    t = await transports(info(url=f"{peer.base}/ok"))
    assert (await (await send(t)).one())[0] == "sent"
    assert len(peer.seen) == 1
    assert proxy.seen == []


def _config(url: str, allowed: list[str]) -> dict[str, Any]:
    return {"transport": {"http": {"url": url, "allowed_hosts": allowed}}}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/x",
        "http://payments.example.evil.test/x",
        "http://evil.test/x?to=payments.example",
        "http://payments.example@evil.test/x",
    ],
)
def test_a_destination_outside_the_allow_list_is_a_config_error(url: str) -> None:
    with pytest.raises(ValidationError) as raised:
        JobTypeConfig.model_validate(_config(url, ["payments.example", "*.bank.example"]))
    assert "is not in allowed_hosts" in str(raised.value)


@pytest.mark.parametrize(
    "url", ["https://payments.example/charges/{payload.id}", "http://eu.bank.example:8443/x"]
)
def test_a_destination_in_the_allow_list_is_accepted(url: str) -> None:
    config = JobTypeConfig.model_validate(_config(url, ["payments.example", "*.bank.example"]))
    assert config.transport.http is not None


async def test_the_allow_list_holds_for_what_is_sent(peer: Peer, transports: Any) -> None:
    t = await transports(
        info(url=f"{peer.base}/ok/{{payload.order_id}}", allowed_hosts=["127.0.0.1"])
    )
    assert (await (await send(t)).one())[0] == "sent"
    assert [s.target for s in peer.seen] == ["/ok/A-17"]
