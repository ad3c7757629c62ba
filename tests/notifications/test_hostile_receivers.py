"""Notification targets that misbehave, as real servers on 127.0.0.1: a URL's secrets
stay out of errors and logs, a receiver that drips its answer is cut off at the
target's timeout (in total, not per read), a huge answer is not read whole, and one
slow target holds up only its own notifications."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.api.conftest import Api, open_api
from tests.notifications.conftest import SECRET, Receiver, notify_settings
from tests.support import eventually

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawReceiver:
    """An HTTP/1.1 receiver written by hand, to answer as no framework would."""

    port: int = 0
    connections: int = 0
    bytes_sent: int = 0
    ended: int = 0  # connections whose handler has ended
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    handlers: set[asyncio.Task[Any]] = field(default_factory=set)

    def url(self, path: str = "/outcomes") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def cut_off(self) -> None:
        for writer in self.writers:
            writer.transport.abort()


@contextlib.asynccontextmanager
async def raw_receiver(
    answer: Callable[[RawReceiver, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[RawReceiver]:
    receiver = RawReceiver()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        receiver.connections += 1
        receiver.writers.append(writer)
        me = asyncio.current_task()
        assert me is not None
        receiver.handlers.add(me)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.lower().split(b"\r\n")
                if line.startswith(b"content-length:")
            )
            await reader.readexactly(length)
            await answer(receiver, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # hipq hung up: what these tests want
        finally:
            receiver.ended += 1
            writer.transport.abort()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    receiver.port = server.sockets[0].getsockname()[1]
    try:
        yield receiver
    finally:
        receiver.cut_off()
        server.close()
        for task in receiver.handlers:
            task.cancel()
        await asyncio.gather(*receiver.handlers, return_exceptions=True)


async def drip(receiver: RawReceiver, writer: asyncio.StreamWriter) -> None:
    """A 200 whose header never ends: one byte every 0.2 s, a read timeout never fires."""
    head = b"HTTP/1.1 200 OK\r\nx-pad: "
    for n in range(10_000):
        writer.write(head[n : n + 1] if n < len(head) else b"a")
        await writer.drain()
        receiver.bytes_sent += 1
        await asyncio.sleep(0.2)


HUGE = 64 * 1024 * 1024


async def huge(receiver: RawReceiver, writer: asyncio.StreamWriter) -> None:
    """A 200 with a 64 MiB body, sent as fast as hipq reads it."""
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % HUGE)
    chunk = bytes(256 * 1024)
    while receiver.bytes_sent < HUGE:
        writer.write(chunk)
        await writer.drain()
        receiver.bytes_sent += len(chunk)


def target(url: str, **webhook: Any) -> dict[str, Any]:
    return {"webhook": {"url": url, "secret": SECRET, **webhook}}


async def failing(api: Api) -> list[dict[str, Any]]:
    answer = await api.client.get("/v1/notifications?status=failing")
    assert answer.status_code == 200, answer.text
    return answer.json()["notifications"]


async def statuses(api: Api, job_id: int) -> dict[str, str]:
    answer = await api.client.get(f"/v1/jobs/{job_id}/notifications")
    assert answer.status_code == 200, answer.text
    return {n["target"]: n["status"] for n in answer.json()}


async def test_a_targets_userinfo_and_query_stay_out_of_errors_and_logs(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    receiver = Receiver(status=503)
    url = receiver.url.replace("://", "://hipq-user:pass-w0rd@") + "?token=t0ken-s3cret"
    settings = notify_settings(receiver, targets={"hook": target(url)})
    with caplog.at_level(logging.DEBUG, logger="hipq"):
        async with receiver.up(), open_api(database_url, **settings) as api:
            await api.post_job(type="ok")
            await api.tick()
            [delivery] = await api.service.notifier.run_once()
            [shown] = await failing(api)
    assert len(receiver.got) == 1  # it was sent, to the URL with its secrets
    assert delivery.error == shown["last_error"] == f"HTTP 503 from {receiver.url}"
    logged = "\n".join(r.getMessage() + repr(r.__dict__) for r in caplog.records)
    assert "notification_failed" in logged and str(receiver.port) in logged
    for secret in ("hipq-user", "pass-w0rd", "t0ken-s3cret"):
        assert secret not in shown["last_error"]
        assert secret not in logged


async def test_a_receiver_that_drips_its_answer_is_cut_off_at_the_timeout(
    database_url: str,
) -> None:
    async with raw_receiver(drip) as slow:
        settings = notify_settings(Receiver(), targets={"hook": target(slow.url(), timeout="1s")})
        async with open_api(database_url, **settings) as api:
            await api.post_job(type="ok")
            await api.tick()
            began = time.monotonic()
            [delivery] = await asyncio.wait_for(api.service.notifier.run_once(), 8)
            took = time.monotonic() - began
            [shown] = await failing(api)
    assert delivery.error == f"no answer from {slow.url()} within 1s"
    assert shown["last_error"] == delivery.error
    assert took < 5, took
    assert 0 < slow.bytes_sent < 30


async def test_a_huge_answer_is_not_read_whole(database_url: str) -> None:
    async with raw_receiver(huge) as big:
        hook = target(big.url(), max_response_bytes=1024)
        settings = notify_settings(Receiver(), targets={"hook": hook})
        async with open_api(database_url, **settings) as api:
            job = await api.post_job(type="ok")
            await api.tick()
            [delivery] = await asyncio.wait_for(api.service.notifier.run_once(), 30)
            assert delivery.error is None  # the status decides: the receiver took it
            assert await statuses(api, job["id"]) == {"hook": "sent"}
            await eventually(lambda: big.ended == 1, timeout=60)
    # What hipq left unread stayed in the receiver (socket buffers hold a few MiB).
    assert big.bytes_sent < HUGE // 4, big.bytes_sent


async def test_a_slow_target_holds_up_only_its_own_notifications(database_url: str) -> None:
    fast = Receiver()
    async with raw_receiver(drip) as slow, fast.up():
        settings = notify_settings(fast, targets={"slow": target(slow.url(), timeout="30s")})
        async with open_api(database_url, **settings) as api:
            notifier = api.service.notifier
            first = await api.post_job(type="ok", notify=["slow", "hook"])
            await api.tick()
            notifier.runs = True
            await notifier.start()
            await eventually(lambda: slow.connections == 1, timeout=60)
            # The slow target's try is under way; the other target's of the same job
            # is delivered and recorded meanwhile.
            await eventually(
                lambda: _is(statuses(api, first["id"]), {"slow": "pending", "hook": "sent"}),
                timeout=60,
            )
            # So is a notification that became due after it.
            second = await api.post_job(type="ok")
            await api.tick()
            await eventually(lambda: _is(statuses(api, second["id"]), {"hook": "sent"}), 60)
            assert slow.ended == 0  # still dripping
            told = sorted(g["body"]["data"]["job_id"] for g in fast.accepted())
            assert told == [first["id"], second["id"]]
            slow.cut_off()  # its try ends now, and is recorded as failing
            await eventually(
                lambda: _is(statuses(api, first["id"]), {"slow": "failing", "hook": "sent"}),
                timeout=60,
            )


async def _is(got: Awaitable[dict[str, str]], want: dict[str, str]) -> bool:
    return await got == want


def test_a_target_timeout_must_be_shorter_than_the_lease(sqlite_url: str) -> None:
    from hipq.config import ConfigError
    from tests.support import make_settings

    hook = target("http://127.0.0.1:9/outcomes", timeout="2m")
    with pytest.raises(ConfigError, match=r"targets.hook.webhook.timeout \(120s\) must be"):
        make_settings(sqlite_url, notifications={"targets": {"hook": hook}})
