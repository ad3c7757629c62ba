"""One table of cases through every way a job enters: ``POST /v1/jobs``,
``POST /v1/jobs/batch``, ``Service.add_job`` and transactional enqueue (the SQL function
on PostgreSQL, ``hipq.ingest.mirrored_intake`` on SQLite). Each case is a job as given
and the stored job's resolved fields, or the field its refusal names: the same on
every path and engine."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import delete

from hipq.app import create_app
from hipq.ingest.job_intake import IntakeError
from hipq.service import Service
from hipq.store import Conflict
from hipq.store.schema import jobs
from hipq.transactional import EnqueueError
from tests.transactional.test_refusals import add

RECEIPT = {"type": "receipt", "payload": {"order": 1}, "labels": {"region": "east"}}
RESOLVED = ("queue", "priority", "weight", "labels", "notify", "timeout_seconds", "retry")
RECEIPT_RESOLVED = (
    "mail",
    7,
    2,
    {"region": "east"},
    None,
    90.0,
    {"strategy": "fixed", "delay": "1s", "max_attempts": 4},
)
TAGGED = ("default", 100, 1, {"kind": "mail", "region": "north"}, ["hook"], 86400.0)
EXPONENTIAL = {"strategy": "exponential"}

# (job as given, the stored job's RESOLVED fields and its correlation key) or the field.
CASES: list[tuple[dict[str, Any], tuple[Any, ...] | str]] = [
    (RECEIPT, (*RECEIPT_RESOLVED, "receipt-1:east")),
    ({"type": "tagged"}, (*TAGGED, EXPONENTIAL, None)),
    (
        {"type": "tagged", "labels": {"region": "east"}, "priority": 3, "weight": 2},
        ("default", 3, 2, {"kind": "mail", "region": "east"}, ["hook"], 86400.0, EXPONENTIAL, None),
    ),
    ({**RECEIPT, "weight": 4}, "weight"),  # beyond the queue's capacity
    ({"type": "nope"}, "type"),
    ({**RECEIPT, "queue": "elsewhere"}, "queue"),
    ({**RECEIPT, "payload": {}}, "payload"),  # its key's template cannot be rendered
    ({"type": "tagged", "job_key": ""}, "job_key"),
    ({"type": "per_attempt", "correlation_key": "x"}, "correlation_key"),
    ({"type": "tagged", "labels": {"region": 1}}, "labels.region"),
]

Add = Callable[[dict[str, Any]], Awaitable[int]]


@pytest.fixture
async def paths(service: Service) -> AsyncIterator[dict[str, Add]]:
    """Each way in: a job in, its stored id out, or an exception naming the field."""
    app = create_app(service, manage_service=False)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://localhost"
    ) as client:

        async def post(job: dict[str, Any]) -> int:
            return _answer(await client.post("/v1/jobs", json=job), "")

        async def post_batch(job: dict[str, Any]) -> int:
            return _answer(await client.post("/v1/jobs/batch", json={"jobs": [job]}), "jobs[0].")

        async def add_job(job: dict[str, Any]) -> int:
            fields = dict(job)
            return (await service.add_job(fields.pop("type"), **fields)).id

        async def transactional(job: dict[str, Any]) -> int:
            try:
                return (await add(service, [job]))[0]
            except EnqueueError as exc:
                raise IntakeError(exc.field.removeprefix("jobs[0]."), exc.message) from None

        yield {
            "post": post,
            "post_batch": post_batch,
            "add_job": add_job,
            "transactional": transactional,
        }


def _answer(answer: httpx.Response, prefix: str) -> int:
    if answer.status_code in (200, 201):
        body = answer.json()
        return int(body["id"] if "id" in body else body["jobs"][0]["id"])
    field = answer.json()["field"]
    assert field.startswith(prefix), answer.text
    raise IntakeError(field.removeprefix(prefix), answer.text)


async def test_every_way_in_resolves_a_job_alike(service: Service, paths: dict[str, Add]) -> None:
    for given, expected in CASES:
        for name, path in paths.items():
            try:
                job_id = await path(dict(given))
            except (IntakeError, Conflict) as exc:
                assert exc.field == expected, (name, given, exc)
                continue
            stored = await service.store.job_get(job_id)
            got = (*(getattr(stored, n) for n in RESOLVED), stored.correlation_key)
            assert got == expected, (name, given)
            async with service.store.engine.begin() as conn:  # its keys free for the next path
                await conn.execute(delete(jobs).where(jobs.c.id == job_id))
