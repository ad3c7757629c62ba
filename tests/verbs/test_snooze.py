"""Snooze: a python handler asks to run again later without spending an attempt, and
an HTTP job type may treat 429/503 with Retry-After the same way (both engines)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.api.conftest import Api, open_api
from tests.peers import serve_app
from tests.support import eventually

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # the FakeClock's start
at = datetime.fromisoformat
SNOOZER = {
    "transport": {"python": {"handler": "tests.verbs.handlers:snoozer"}},
    "retry": {"strategy": "fixed", "delay": "10s", "max_attempts": 2},
}


async def test_a_handler_snoozes_without_spending_attempts(database_url: str) -> None:
    async with open_api(database_url, job_types={"snoozer": SNOOZER}) as api:
        job = await api.post_job(type="snoozer", payload={"times": 3})
        for n in range(1, 4):  # more snoozes than max_attempts allows failures
            await api.tick()
            waiting = await api.job(job["id"])
            assert waiting["state"] == "scheduled", waiting
            assert waiting["attempt"] == 0 and waiting["payload"]["snoozed"] == n
            assert datetime.fromisoformat(waiting["run_at"]) == api.clock.now + timedelta(
                seconds=30
            )
            assert waiting["last_error"] == "not yet" and waiting["attempts"] == []
            api.clock.advance(30)
        await api.tick()
        done = await api.job(job["id"])
        assert done["state"] == "completed" and done["result"] == {"attempt": 1, "snoozed": 3}


def busy_then_fine() -> tuple[Starlette, list[int]]:
    answered: list[int] = []

    async def endpoint(request: Request) -> JSONResponse:
        status = 429 if len(answered) < 2 else 200
        answered.append(status)
        headers = {"Retry-After": "7"} if status == 429 else {}
        return JSONResponse({"ok": status == 200}, status_code=status, headers=headers)

    return Starlette(routes=[Route("/work", endpoint, methods=["POST"])]), answered


def http_type(base: str, **extra: Any) -> dict[str, Any]:
    return {
        "transport": {"http": {"url": f"{base}/work", "callback": False, **extra}},
        "retry": {"strategy": "fixed", "delay": "10s", "max_attempts": 1},
    }


async def settled(api: Api, job_id: int) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        await api.tick(ticks=1)
        job = await api.job(job_id)
        return job if job["state"] != "running" else None

    return await eventually(check)


async def test_http_429_with_retry_after_snoozes_where_configured(database_url: str) -> None:
    app, answered = busy_then_fine()
    async with serve_app(app) as base:
        types = {"polite": http_type(base, snooze_statuses=[429, 503])}
        async with open_api(database_url, job_types=types) as api:
            job = await api.post_job(type="polite")
            for _ in range(2):  # max_attempts 1: a failure would end the job
                waiting = await settled(api, job["id"])
                assert waiting["state"] == "scheduled" and waiting["attempt"] == 0
                assert "HTTP 429" in waiting["last_error"]
                assert datetime.fromisoformat(waiting["run_at"]) == api.clock.now + timedelta(
                    seconds=7
                )
                api.clock.advance(7)
            done = await settled(api, job["id"])
            assert done["state"] == "completed" and done["attempt"] == 1
    assert answered == [429, 429, 200]


async def test_http_429_is_a_failure_by_default(database_url: str) -> None:
    app, _answered = busy_then_fine()
    async with serve_app(app) as base:
        async with open_api(database_url, job_types={"plain": http_type(base)}) as api:
            job = await api.post_job(type="plain")
            failed = await settled(api, job["id"])
            assert failed["state"] == "failed" and failed["attempt"] == 1
