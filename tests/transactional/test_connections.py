"""Jobs added in the application's own transaction, through every kind of connection,
on SQLite and PostgreSQL: a committed job is the job a POST would have made and runs;
a rolled-back one never existed; a refused one raises inside the transaction and
takes the application's other writes with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hipq.ingest.job_intake import IntakeError
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.service import Service
from hipq.store import JobFilter
from hipq.transactional import EnqueueError
from tests.support import eventually
from tests.transactional.apps import in_transaction, orders

RECEIPT = {"type": "receipt", "payload": {"order": 17}, "labels": {"region": "east"}}


async def all_jobs(svc: Service) -> list[Job]:
    return sorted(await svc.store.job_list(JobFilter(limit=1000)), key=lambda j: j.id)


async def run_to_the_end(svc: Service, job: Job) -> Job:
    loop = svc.loops[job.queue]
    assert await loop.acquire()

    async def finished() -> Job | None:
        await loop.run_once()
        current = await svc.store.job_get(job.id)
        return current if current.state is State.COMPLETED else None

    done: Job = await eventually(finished)
    return done


def posted(svc: Service, fields: dict[str, object]) -> dict[str, object]:
    """What a POST of ``fields`` would store (the columns intake resolves)."""
    new = svc.intake.resolve(dict(fields), datetime.now(UTC))
    return {
        "type": new.type,
        "queue": new.queue,
        "priority": new.priority,
        "weight": new.weight,
        "timeout_seconds": new.timeout_seconds,
        "retry": new.retry,
        "labels": new.labels,
        "payload": new.payload,
        "critical": new.critical,
        "correlation_key": new.correlation_key,
    }


_COLUMNS = (
    "type queue priority weight timeout_seconds retry labels payload critical correlation_key"
).split()


def columns(job: Job) -> dict[str, object]:
    return {name: getattr(job, name) for name in _COLUMNS}


async def test_a_committed_job_is_the_posted_one_and_runs(
    app_service: tuple[Service, str],
) -> None:
    svc, kind = app_service
    [job_id] = await in_transaction(kind, svc.settings.database_url, 1, [RECEIPT], commit=True)
    job = await svc.store.job_get(job_id)
    assert columns(job) == posted(svc, RECEIPT)
    assert job.correlation_key == "receipt-17:east"  # rendered from the job type's template
    assert job.state is State.SCHEDULED and job.attempt == 0
    assert await orders(svc.settings.database_url) == [1]
    done = await run_to_the_end(svc, job)
    assert done.result == {"echo": {"order": 17}}


async def test_add_job_takes_the_fields_as_arguments(app_service: tuple[Service, str]) -> None:
    svc, kind = app_service
    run_at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    fields = {**RECEIPT, "priority": -3, "max_attempts": 9, "run_at": run_at, "critical": True}
    [job_id] = await in_transaction(
        kind, svc.settings.database_url, 2, [fields], commit=True, one=True
    )
    job = await svc.store.job_get(job_id)
    assert (job.priority, job.retry["max_attempts"], job.critical) == (-3, 9, True)
    assert job.run_at == run_at
    assert job.retry == {"strategy": "fixed", "delay": "1s", "max_attempts": 9}


async def test_a_rolled_back_transaction_leaves_no_job(app_service: tuple[Service, str]) -> None:
    svc, kind = app_service
    jobs = [RECEIPT, {**RECEIPT, "payload": {"order": 18}}]
    ids = await in_transaction(kind, svc.settings.database_url, 3, jobs, commit=False)
    assert len(ids) == 2
    assert await all_jobs(svc) == []
    assert await orders(svc.settings.database_url) == []
    # The key it would have held is free: the same job can be added again.
    [again] = await in_transaction(kind, svc.settings.database_url, 3, [RECEIPT], commit=True)
    assert [j.id for j in await all_jobs(svc)] == [again]


async def test_an_unknown_type_raises_in_the_transaction(app_service: tuple[Service, str]) -> None:
    svc, kind = app_service
    jobs = [RECEIPT, {"type": "recipt", "payload": {}}]
    with pytest.raises(EnqueueError) as caught:
        await in_transaction(kind, svc.settings.database_url, 4, jobs, commit=True)
    assert caught.value.field == "jobs[1].type"
    with pytest.raises(IntakeError) as api:  # what a POST of it is told
        svc.intake.job_type("recipt")
    assert caught.value.message == api.value.message
    assert not caught.value.conflict
    # The error left the application's transaction: its order and the first job are gone.
    assert await orders(svc.settings.database_url) == []
    assert await all_jobs(svc) == []


async def test_a_correlation_key_an_open_job_holds_is_a_conflict(
    app_service: tuple[Service, str],
) -> None:
    svc, kind = app_service
    await in_transaction(kind, svc.settings.database_url, 5, [RECEIPT], commit=True)
    with pytest.raises(EnqueueError) as caught:
        await in_transaction(kind, svc.settings.database_url, 6, [RECEIPT], commit=True)
    assert (caught.value.field, caught.value.conflict) == ("jobs[0].correlation_key", True)
    assert await orders(svc.settings.database_url) == [5]
