"""What hipq_add_jobs (PostgreSQL) and hipq.transactional (SQLite) refuse, and how they
resolve what they accept: the same on both engines, and as a POST does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import create_async_engine

from hipq.service import Service
from hipq.store.schema import jobs
from hipq.transactional import EnqueueError, add_job_async, add_jobs_async

OK = {"type": "receipt", "payload": {"order": 1}, "labels": {"region": "east"}}


async def add(svc: Service, jobs: list[dict[str, Any]]) -> list[int]:
    engine = create_async_engine(svc.settings.database_url)
    try:
        async with engine.begin() as conn:
            return await add_jobs_async(conn, jobs)
    finally:
        await engine.dispose()


REFUSED = [
    ({"type": 7}, "type", "must be the name of a job type"),
    ({"type": "receipt", "colour": "red"}, "colour", "unknown field"),
    ({**OK, "queue": "nowhere"}, "queue", "unknown queue 'nowhere'"),
    ({**OK, "payload": [1]}, "payload", "must be a JSON object"),
    ({**OK, "labels": {"region": 1}}, "labels.region", "must be a string"),
    ({**OK, "run_at": "2026-01-05 12:00"}, "run_at", "must be an RFC 3339 instant"),
    ({**OK, "run_at": "tomorrow"}, "run_at", "must be an RFC 3339 instant"),
    ({**OK, "priority": 1.5}, "priority", "must be an integer"),
    ({**OK, "priority": "high"}, "priority", "must be an integer"),
    ({**OK, "weight": 0}, "weight", "must be an integer between 1 and 1000000"),
    ({**OK, "weight": 4}, "weight", "4 exceeds the capacity 3 of queue mail"),
    ({**OK, "timeout_seconds": 0}, "timeout_seconds", "must be greater than zero"),
    ({**OK, "timeout_seconds": 4e8}, "timeout_seconds", "must be at most 3650d"),
    ({**OK, "max_attempts": 0}, "max_attempts", "must be an integer between 1 and 10000"),
    ({**OK, "critical": "yes"}, "critical", "must be true or false"),
    ({**OK, "correlation_key": ""}, "correlation_key", "must not be empty"),
    ({**OK, "correlation_key": "a\nb"}, "correlation_key", "must not contain control"),
    ({**OK, "correlation_key": "k" * 501}, "correlation_key", "at most 500 characters"),
    ({"type": "receipt", "labels": {"region": "e"}}, "payload", "payload.order is missing"),
    ({**OK, "payload": {"order": None}}, "payload", "payload.order is missing"),
    ({**OK, "payload": {"order": {"a": 1}}}, "payload", "is an object"),
    ({**OK, "payload": {"order": [1]}}, "payload", "is a list"),
    ({**OK, "flags": "urgent"}, "flags", "must be a list of flag names"),
    ({**OK, "flags": ["ok", ""]}, "flags[1]", "must be a flag name"),
    ({**OK, "flags": [7]}, "flags[0]", "must be a flag name"),
    ({**OK, "flags": ["a\tb"]}, "flags[0]", "no control characters"),
    ({**OK, "flags": ["a\x7fb"]}, "flags[0]", "no control characters"),
    ({**OK, "flags": ["ok", "a\x85b"]}, "flags[1]", "no control characters"),
    ({**OK, "flags": ["f"] * 21}, "flags", "must hold at most 20 flags"),
    ({**OK, "job_key": 7}, "job_key", "must be a string"),
    ({**OK, "job_key": ""}, "job_key", "a job_key must not be empty"),
    ({**OK, "job_key": "a\nb"}, "job_key", "must not contain control characters"),
    ({**OK, "job_key": ".."}, "job_key", "cannot be '.' or '..'"),
    ({**OK, "job_key": "k" * 501}, "job_key", "must be at most 500 characters"),
    ({**OK, "job_key": "k", "job_key_mode": "keep"}, "job_key_mode", "must be one of replace"),
    ({**OK, "job_key": "k", "job_key_mode": 1}, "job_key_mode", "must be one of replace"),
    ({**OK, "unique_for": "1h"}, "unique_for", "needs a job_key"),
    ({**OK, "job_key": "k", "unique_for": -5}, "unique_for", "must be greater than zero"),
    ({**OK, "job_key": "k", "unique_for": 0}, "unique_for", "must be greater than zero"),
    ({**OK, "job_key": "k", "unique_for": "3651d"}, "unique_for", "at most 3650d"),
    ({**OK, "job_key": "k", "unique_for": "soon"}, "unique_for", "a duration such as '1h'"),
    ({**OK, "job_key": "k", "unique_for": "-5"}, "unique_for", "a duration such as '1h'"),
    ({**OK, "job_key": "k", "unique_for": True}, "unique_for", "a duration such as '1h'"),
    (
        {"type": "per_attempt", "payload": {"order": 1}, "correlation_key": "mine"},
        "correlation_key",
        "builds its key per attempt",
    ),
]


@pytest.mark.parametrize(("job", "field", "message"), REFUSED)
async def test_refused_with_the_field_named(
    service: Service, job: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(EnqueueError) as caught:
        await add(service, [OK | {"payload": {"order": 99}}, job])
    assert caught.value.field == f"jobs[1].{field}"
    assert message in caught.value.message
    assert not caught.value.conflict


async def test_an_empty_list_is_refused(service: Service) -> None:
    with pytest.raises(EnqueueError, match="jobs: must hold at least one job"):
        await add(service, [])


async def test_a_single_job_names_its_field_alone(service: Service) -> None:
    engine = create_async_engine(service.settings.database_url)
    try:
        with pytest.raises(EnqueueError) as caught:
            async with engine.begin() as conn:
                await add_job_async(conn, "receipt", {"order": 1}, labels={"region": "e"}, weight=9)
    finally:
        await engine.dispose()
    assert (caught.value.field, caught.value.message) == (
        "weight",
        "9 exceeds the capacity 3 of queue mail",
    )


KEYS = [
    ({"order": 17}, "receipt-17:east"),
    ({"order": 17.0}, "receipt-17:east"),  # the same JSON number as 17
    ({"order": 2.5}, "receipt-2.5:east"),
    ({"order": True}, "receipt-true:east"),
    ({"order": "A-17"}, "receipt-A-17:east"),
    ({"order": 12345678901234567}, "receipt-12345678901234567:east"),
]


@pytest.mark.parametrize(("payload", "key"), KEYS)
async def test_the_correlation_key_is_rendered_as_intake_renders_it(
    service: Service, payload: dict[str, Any], key: str
) -> None:
    fields = {"type": "receipt", "payload": payload, "labels": {"region": "east"}}
    [job_id] = await add(service, [fields])
    assert (await service.store.job_get(job_id)).correlation_key == key
    assert service.intake.resolve(dict(fields), datetime.now(UTC)).correlation_key == key


@pytest.mark.parametrize("key", ["a/heartbeat", ".."])
async def test_a_given_key_no_callback_can_reach_is_refused_or_fails_at_claim(
    service: Service, key: str
) -> None:
    if service.settings.database_url.startswith("sqlite"):
        # hipq.transactional checks a key as a POST does.
        with pytest.raises(EnqueueError) as caught:
            await add(service, [{**OK, "correlation_key": key}])
        assert caught.value.field == "jobs[0].correlation_key"
        return
    # PostgreSQL's hipq_add_jobs (its checks are a migration's) takes it: the loop fails
    # the job when it claims it, without sending it, instead of letting it time out.
    [job_id] = await add(service, [{**OK, "correlation_key": key}])
    loop = service.loops["mail"]
    assert await loop.acquire()
    await loop.run_once()
    await loop.run_once()
    job = await service.store.job_get(job_id)
    assert job.state == "failed" and job.last_error is not None
    assert f"correlation key {key!r}" in job.last_error
    assert job.attempt == 1


async def test_a_key_built_per_attempt_is_built_when_the_loop_claims_the_job(
    service: Service,
) -> None:
    [job_id] = await add(service, [{"type": "per_attempt", "payload": {"order": "B-2"}}])
    assert (await service.store.job_get(job_id)).correlation_key is None
    loop = service.loops["default"]
    assert await loop.acquire()
    await loop.run_once()
    assert (await service.store.job_get(job_id)).correlation_key == "B-2:1"


async def test_unset_fields_take_the_job_types_defaults(service: Service) -> None:
    [job_id] = await add(service, [OK])
    job = await service.store.job_get(job_id)
    assert (job.queue, job.priority, job.weight, job.timeout_seconds) == ("mail", 7, 2, 90.0)
    assert job.retry == {"strategy": "fixed", "delay": "1s", "max_attempts": 4}
    assert job.windows is None and job.job_key is None and not job.critical
    assert job.flags is None


@pytest.mark.parametrize("period", [90, 90.0, "90", "1m30s", "1m 30s", "1500ms 88.5s"])
async def test_unique_for_is_read_as_the_api_reads_it(service: Service, period: Any) -> None:
    fields = {**OK, "job_key": "p", "unique_for": period}
    assert service.intake.resolve(dict(fields), datetime.now(UTC)).unique_for_seconds == 90
    [first] = await add(service, [fields])
    # A job created 75 s ago is within the period; one created 105 s ago is not. (15 s
    # either side: the database's clock reads the age a loaded machine's seconds later.)
    engine = create_async_engine(service.settings.database_url)
    try:
        for ago, same in ((75, True), (105, False)):
            async with engine.begin() as conn:
                created = datetime.now(UTC) - timedelta(seconds=ago)
                await conn.execute(update(jobs).values(created_at=created, state="completed"))
            [again] = await add(service, [fields])
            assert (again == first) is same
    finally:
        await engine.dispose()


async def test_a_job_takes_its_types_labels_and_targets_as_a_post_does(
    service: Service,
) -> None:
    # Without the type's labels a share by one of them would never admit the job.
    given = {"type": "tagged", "payload": {}, "labels": {"region": "east"}}
    [added] = await add(service, [given])
    [bare] = await add(service, [{"type": "tagged"}])
    posted = service.intake.resolve(dict(given), datetime.now(UTC))
    assert (posted.labels, posted.notify) == ({"kind": "mail", "region": "east"}, ["hook"])
    stored = await service.store.job_get(added)
    assert (stored.labels, stored.notify) == (posted.labels, posted.notify)
    default = await service.store.job_get(bare)
    assert (default.labels, default.notify) == ({"kind": "mail", "region": "north"}, ["hook"])


async def test_flags_are_stored_as_a_post_stores_them(service: Service) -> None:
    flags = ["urgent", "b", "urgent", "A", "é"]
    [job_id] = await add(service, [{**OK, "flags": flags}])
    stored = (await service.store.job_get(job_id)).flags
    assert stored == ["A", "b", "urgent", "é"]
    assert service.intake.resolve({**OK, "flags": flags}, datetime.now(UTC)).flags == stored
