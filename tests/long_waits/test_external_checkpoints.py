"""Checkpoints from the external system: a heartbeat carries a new payload, the loop
takes it into its tick, and the retry of a failed attempt is sent with it (signed
and unsigned job types alike); bad checkpoints are refused, naming the field."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.external.test_http_callbacks import running_hipq
from tests.long_waits.test_heartbeats import SECRET, World
from tests.peers import CallbackService, free_port, serve_app
from tests.support import eventually, make_settings


class RecordingPeer(CallbackService):
    """The stand-in external system, which also keeps every request body it got."""

    def __init__(self) -> None:
        super().__init__(seed=7)
        self.bodies: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        self.app = Starlette(routes=[Route("/charges", self._record, methods=["POST"])])

    async def _record(self, request: Request) -> JSONResponse:
        body = await request.json()
        body.pop("callback_url", None)  # what hipq adds to the payload it sends
        self.bodies[str(body["order_id"])].append(body)
        return await self._charge(request)


def settings_for(database_url: str, external: str) -> Any:
    signed = {
        "correlation_key": "{payload.order_id}",
        "timeout": "60s",
        "heartbeat_timeout": "1s",  # silence after the checkpoint fails the attempt
        "retry": {"strategy": "fixed", "delay": "50ms", "max_attempts": 2},
        "outcome": {"field": "status", "success": ["ok"]},
        "callback_signature": {"secret": SECRET},
        "transport": {"http": {"url": f"{external}/charges", "timeout": "5s"}},
    }
    unsigned = {k: v for k, v in signed.items() if k != "callback_signature"}
    return make_settings(
        database_url,
        job_types={"signed": signed, "unsigned": unsigned},
        server={"host": "127.0.0.1", "port": free_port()},
        queues={"default": {"batch_interval": "100ms"}},
    )


@pytest.fixture
async def world(database_url: str) -> AsyncIterator[tuple[World, RecordingPeer]]:
    peer = RecordingPeer()
    async with serve_app(peer.app) as ext:
        async with running_hipq(settings_for(database_url, ext)) as (service, api):
            yield World(api, service, peer), peer
    await peer.close()


@pytest.mark.parametrize("type", ["signed", "unsigned"])
async def test_a_retry_starts_from_the_checkpoint(
    world: tuple[World, RecordingPeer], type: str
) -> None:
    hipq, peer = world
    key = f"ck-{type}"
    job = await hipq.post(type, key)
    await eventually(lambda: key in peer.held, timeout=60)
    url = hipq.heartbeat_url(key)
    checkpoint = {"order_id": key, "behavior": "hold", "done": 40}
    beat = await hipq.heartbeat(
        url, {"progress": {"done": 40}, "checkpoint": checkpoint}, signed=type == "signed"
    )
    assert beat.status_code == 202, beat.text
    peer.held.pop(key)

    # Then silence: the attempt fails at its heartbeat deadline and is retried.
    async def retried() -> bool:
        return len(peer.bodies[key]) == 2

    await eventually(retried, timeout=60, interval=0.1)
    first, second = peer.bodies[key]
    assert first == {"order_id": key, "behavior": "hold"}
    assert second == checkpoint
    seen = await hipq.job(job["id"])
    assert seen["payload"] == checkpoint
    assert seen["attempts"][0]["outcome"] == "retried"


async def test_bad_checkpoints_are_refused_naming_the_field(
    world: tuple[World, RecordingPeer],
) -> None:
    hipq, peer = world
    await hipq.post("signed", "ck-bad")
    await eventually(lambda: "ck-bad" in peer.held, timeout=60)
    url = hipq.heartbeat_url("ck-bad")
    for checkpoint, field in [
        ([1, 2], "checkpoint"),
        ("start over", "checkpoint"),
        (None, "checkpoint"),
        ({"note": "a\u0000b"}, "body.checkpoint.note"),
    ]:
        answer = await hipq.heartbeat(url, {"checkpoint": checkpoint})
        assert answer.status_code == 422, (checkpoint, answer.text)
        assert answer.json()["errors"][0]["field"] == field, (checkpoint, answer.text)
    # Over the payload limit (server.max_body_bytes): refused before it is read.
    limit = hipq.service.settings.server.max_body_bytes
    big = await hipq.heartbeat(url, {"checkpoint": {"blob": "x" * (limit + 1)}})
    assert big.status_code == 413, big.text
    # A large checkpoint within the limit is fine: only the progress has its 4 KiB.
    large = {"order_id": "ck-bad", "behavior": "hold", "blob": "x" * 10_000}
    assert (await hipq.heartbeat(url, {"checkpoint": large})).status_code == 202
    # A job not in flight takes no checkpoint, as it takes no heartbeat.
    await hipq.post("signed", "ck-later", run_at="2999-01-01T00:00:00Z")
    waiting = await hipq.heartbeat(
        "/v1/callbacks/ck-later/heartbeat?type=signed", {"checkpoint": {"order_id": "x"}}
    )
    assert waiting.status_code == 409, waiting.text
    listed = (await hipq.api.get("/v1/jobs", params={"type": "signed"})).json()["jobs"]
    later = next(j for j in listed if j["payload"]["order_id"] == "ck-later")
    assert later["payload"] == {"order_id": "ck-later", "behavior": "hold"}
