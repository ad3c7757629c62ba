"""After a crash, a queue's new owner sends `running` jobs again at once, or, where the
job type says `after_crash: retry`, after its retry strategy's delay (both engines).

The crash is the owner losing its lease with its jobs running, and a new owner taking
the queue over: what a killed process leaves behind (tests/e2e kills real ones).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests import handlers
from tests.api.conftest import Api, open_api
from tests.peers import serve_app
from tests.support import eventually

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # the FakeClock's start
HANG = {
    "transport": {"python": {"handler": "tests.handlers:hang"}},
    "retry": {"strategy": "fixed", "delay": "10s", "max_attempts": 3},
}


async def crash_and_take_over(api: Api) -> None:
    loop = api.loop()
    await api.service.store.lease_clear_all()  # the dead owner's lease, expired
    loop._lose_lease()  # the dead owner's tasks are gone
    assert await loop.acquire()


async def test_running_jobs_are_sent_again_at_once_by_default(database_url: str) -> None:
    async with open_api(database_url, job_types={"resent": HANG}) as api:
        job = await api.post_job(type="resent")
        await api.tick()
        await crash_and_take_over(api)
        await eventually(lambda: job["id"] in handlers.RUNNING)
        again = await api.job(job["id"])
        assert again["state"] == "running" and again["attempt"] == 1


async def test_after_crash_retry_waits_for_the_retry_strategy(database_url: str) -> None:
    types = {"careful": {**HANG, "after_crash": "retry"}}
    async with open_api(database_url, job_types=types) as api:
        job = await api.post_job(type="careful")
        await api.tick()
        await crash_and_take_over(api)
        assert job["id"] not in handlers.RUNNING
        await api.tick(ticks=1)
        waiting = await api.job(job["id"])
        assert waiting["state"] == "scheduled" and waiting["attempt"] == 1
        assert datetime.fromisoformat(waiting["run_at"]) == NOW + timedelta(seconds=10)
        assert "interrupted" in waiting["last_error"]


def counting_receiver() -> tuple[Starlette, list[int]]:
    """Answers 202 to every request and keeps the job number it carried."""
    received: list[int] = []

    async def endpoint(request: Request) -> JSONResponse:
        received.append((await request.json())["n"])
        return JSONResponse({"accepted": True}, status_code=202)

    return Starlette(routes=[Route("/work", endpoint, methods=["POST"])]), received


async def test_a_callback_stored_while_nobody_owned_the_queue_settles_without_a_resend(
    database_url: str,
) -> None:
    app, received = counting_receiver()
    async with serve_app(app) as base:
        sent = {
            "transport": {"http": {"url": f"{base}/work"}},
            "correlation_key": "n{payload.n}",
            "retry": {"strategy": "none"},
        }
        async with open_api(database_url, job_types={"sent": sent}) as api:
            job = await api.post_job(type="sent", payload={"n": 1})
            await api.loop().acquire()
            await api.loop().run_once()  # claimed and sent; the owner dies before it notes it
            await eventually(lambda: received == [1])
            await api.service.store.lease_clear_all()  # the dead owner's lease, expired
            api.loop()._lose_lease()
            # The callback came while nobody owned the queue: stored, not yet matched.
            callback = await api.client.post("/v1/callbacks/n1", json={"status": "ok"})
            assert callback.status_code == 202, callback.text
            assert (await api.job(job["id"]))["state"] == "running"
            assert await api.loop().acquire()
            await api.tick()
            done = await api.job(job["id"])
            assert done["state"] == "completed" and done["result"] == {"status": "ok"}
            # A job posted after the takeover reaches the receiver; the answered one
            # was not sent again before it.
            await api.post_job(type="sent", payload={"n": 2})
            await api.tick()
            await eventually(lambda: 2 in received)
            assert received == [1, 2]
