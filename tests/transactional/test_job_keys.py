"""A job_key decides the same on every path that adds jobs: one table of cases, run
through the API's path (intake and store), hipq.transactional (SQLite's Python path and
PostgreSQL's hipq_add_jobs), and hipq_add_job called in SQL; the pure decision and
its PL/pgSQL copy agree on every input; concurrent first adds make one job."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from hipq.job_keys import JOB_KEY_MODES, KeyAction, key_action
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.service import Service
from hipq.store import JobFilter
from hipq.store.schema import jobs
from hipq.transactional import EnqueueError, add_job_async
from tests.support import eventually
from tests.transactional.apps import urls
from tests.transactional.conftest import started

LABELS = {"region": "east"}
LABELS_SQL = 'labels => \'{"region": "east"}\''
ADD_SQL = "SELECT hipq_add_job('receipt', '{{\"order\": {order}}}', {labels}, {args})"


@dataclass(frozen=True)
class KeyCase:
    """The job holding key ``k`` (None: no job has it), then a job added with ``mode``."""

    name: str
    holder: str | None  # its state; "retried": scheduled again after a failed attempt
    mode: str
    action: KeyAction
    unique_for: float | None = None
    created_ago: float = 60.0  # how long before the add the holder was created


A = KeyAction
CASES = [
    KeyCase("no-holder", None, "replace", A.INSERT),
    KeyCase("no-holder-dedupe", None, "unsafe_dedupe", A.INSERT),
    KeyCase("scheduled-replace", "scheduled", "replace", A.REPLACE),
    KeyCase("scheduled-preserve", "scheduled", "preserve_run_at", A.REPLACE_KEEP_RUN_AT),
    KeyCase("scheduled-dedupe", "scheduled", "unsafe_dedupe", A.RETURN),
    KeyCase("retried-replace", "retried", "replace", A.REPLACE),
    KeyCase("retried-preserve", "retried", "preserve_run_at", A.REPLACE),
    KeyCase("retried-dedupe", "retried", "unsafe_dedupe", A.RETURN),
    KeyCase("running-replace", "running", "replace", A.TAKE_OVER),
    KeyCase("awaiting-preserve", "awaiting", "preserve_run_at", A.TAKE_OVER),
    KeyCase("running-dedupe", "running", "unsafe_dedupe", A.RETURN),
    KeyCase("failed-replace", "failed", "replace", A.INSERT),
    KeyCase("failed-dedupe", "failed", "unsafe_dedupe", A.RETURN),
    KeyCase("completed-dedupe", "completed", "unsafe_dedupe", A.INSERT),
    KeyCase("cancelled-replace", "cancelled", "replace", A.INSERT),
    KeyCase("period-completed", "completed", "replace", A.RETURN, unique_for=3600),
    KeyCase("period-scheduled", "scheduled", "replace", A.RETURN, unique_for=3600),
    KeyCase("period-over", "completed", "replace", A.INSERT, 3600, created_ago=7200),
    KeyCase("period-over-kept", "scheduled", "preserve_run_at", A.REPLACE_KEEP_RUN_AT, 3600, 7200),
]
PATHS = ["api", "transactional", "sql"]


def holder_of(case: KeyCase) -> tuple[State, int] | None:
    if case.holder is None:
        return None
    if case.holder == "retried":
        return State.SCHEDULED, 1
    return State(case.holder), 0 if case.holder == "scheduled" else 1


def in_period(case: KeyCase) -> bool:
    return case.holder is not None and (case.unique_for or 0) > case.created_ago


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_decision(case: KeyCase) -> None:
    assert key_action(case.mode, holder_of(case), in_period(case)) is case.action


async def make_holder(svc: Service, case: KeyCase, now: datetime, run_at: datetime) -> Job:
    """The job holding the key, in the case's state (set directly: the loop's way
    there is tested elsewhere), created ``created_ago`` before ``now``."""
    job = await svc.add_job("receipt", {"order": 1}, labels=LABELS, job_key="k", run_at=run_at)
    state, attempt = holder_of(case) or (State.SCHEDULED, 0)
    changes: dict[str, Any] = {
        "state": state.value,
        "attempt": attempt,
        "created_at": now - timedelta(seconds=case.created_ago),
        "last_error": "boom" if attempt else None,
        "finished_at": now if state in (State.COMPLETED, State.FAILED, State.CANCELLED) else None,
    }
    async with svc.store.engine.begin() as conn:
        await conn.execute(sa.update(jobs).where(jobs.c.id == job.id).values(**changes))
    return await svc.store.job_get(job.id)


async def add_keyed(
    svc: Service, path: str, mode: str, unique_for: float | None, run_at: datetime
) -> int:
    """Job ``k`` with payload order 2, added through ``path``; the id it was given."""
    if path == "api":
        job = await svc.add_job(
            "receipt",
            {"order": 2},
            labels=LABELS,
            run_at=run_at,
            job_key="k",
            job_key_mode=mode,  # type: ignore[arg-type]
            unique_for=unique_for,
        )
        return job.id
    if path == "transactional":
        engine = create_async_engine(svc.settings.database_url)
        try:
            async with engine.begin() as conn:
                return await add_job_async(
                    conn,
                    "receipt",
                    {"order": 2},
                    labels=LABELS,
                    run_at=run_at,
                    job_key="k",
                    job_key_mode=mode,
                    unique_for=unique_for,
                )
        finally:
            await engine.dispose()
    conn = await asyncpg.connect(urls(svc.settings.database_url)["libpq"])
    try:
        period = None if unique_for is None else timedelta(seconds=unique_for)
        return int(
            await conn.fetchval(
                ADD_SQL.format(
                    order=2,
                    labels=LABELS_SQL,
                    args="run_at => $1, job_key => 'k', job_key_mode => $2, unique_for => $3",
                ),
                run_at,
                mode,
                period,
            )
        )
    finally:
        await conn.close()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_every_path_decides_alike(service: Service, case: KeyCase, path: str) -> None:
    if path == "sql" and not service.settings.database_url.startswith("postgresql"):
        pytest.skip("SQL functions are PostgreSQL's")
    now = datetime.now(UTC).replace(microsecond=0)
    old_run_at, new_run_at = now + timedelta(hours=1), now + timedelta(hours=2)
    holder = None if case.holder is None else await make_holder(service, case, now, old_run_at)
    job_id = await add_keyed(service, path, case.mode, case.unique_for, new_run_at)
    by_id = {j.id: j for j in await service.store.job_list(JobFilter())}
    job = by_id[job_id]
    if case.action in (A.INSERT, A.TAKE_OVER):
        assert holder is None or job_id != holder.id
        assert len(by_id) == (1 if holder is None else 2)
        assert (job.payload, job.job_key, job.state) == ({"order": 2}, "k", State.SCHEDULED)
        assert job.run_at == new_run_at and job.attempt == 0
    if holder is None:
        return
    before, after = holder, by_id[holder.id]
    if case.action is A.INSERT:
        assert after == before
    elif case.action is A.TAKE_OVER:
        assert after.job_key is None and after.retry == {"strategy": "none"}
        assert after.state == before.state
    elif case.action is A.RETURN:
        assert (job_id, len(by_id)) == (holder.id, 1)
        assert after == before
    else:
        assert (job_id, len(by_id)) == (holder.id, 1)
        kept = case.action is A.REPLACE_KEEP_RUN_AT
        assert after.run_at == (old_run_at if kept else new_run_at)
        assert after.payload == {"order": 2} and after.correlation_key == "receipt-2:east"
        assert (after.last_error, after.attempt, after.job_key) == (None, before.attempt, "k")
        assert after.created_at == before.created_at


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("mode", ["replace", "preserve_run_at"])
async def test_a_replace_of_a_waiting_job_replaces_its_waits(
    service: Service, mode: str, path: str
) -> None:
    """A job added with the key of a job that waits for another takes its place and
    waits for nothing, on every path: it runs at the new run_at (preserve_run_at: at
    its own), not when the job it waited for ends, and not at once."""
    if path == "sql" and not service.settings.database_url.startswith("postgresql"):
        pytest.skip("SQL functions are PostgreSQL's")
    now = datetime.now(UTC).replace(microsecond=0)
    old_run_at, new_run_at = now + timedelta(hours=1), now + timedelta(hours=2)
    first = await service.add_job("receipt", {"order": 0}, labels=LABELS, run_at=old_run_at)
    waiting = await service.add_job(
        "receipt", {"order": 1}, labels=LABELS, job_key="k", run_at=old_run_at, after=[first.id]
    )
    assert (waiting.waiting_for, waiting.after) == (1, [first.id])
    assert await add_keyed(service, path, mode, None, new_run_at) == waiting.id
    job = await service.store.job_get(waiting.id)
    assert (job.payload, job.state, job.waiting_for or 0, job.after) == (
        {"order": 2},
        State.SCHEDULED,
        0,
        None,
    )
    assert job.run_at == (old_run_at if mode == "preserve_run_at" else new_run_at)


@pytest.mark.postgres
async def test_the_sql_decision_is_the_python_one(postgres_url_fresh: str) -> None:
    conn = await asyncpg.connect(urls(postgres_url_fresh)["libpq"])
    try:
        for mode, state, attempt, period in itertools.product(
            JOB_KEY_MODES, [None, *State], (0, 1), (False, True)
        ):
            holder = None if state is None else (state, attempt)
            sql = await conn.fetchval(
                "SELECT hipq_key_action($1, $2, $3, $4)",
                mode,
                None if state is None else state.value,
                attempt,
                period,
            )
            assert sql == key_action(mode, holder, period).value, (mode, holder, period)
    finally:
        await conn.close()


RACERS = 6


@pytest.mark.postgres
async def test_concurrent_first_adds_become_one_job(postgres_url_fresh: str) -> None:
    """The first add holds its transaction open; the others, in SQL and through
    hipq.transactional, wait for its key; when it commits, each gets its job."""
    svc = await started(postgres_url_fresh)
    libpq = urls(postgres_url_fresh)["libpq"]
    first, watcher, *racers = [await asyncpg.connect(libpq) for _ in range(RACERS + 2)]
    add = ADD_SQL.format(order=1, labels=LABELS_SQL, args="job_key => 'fresh'")
    try:
        holding = first.transaction()
        await holding.start()
        kept = await first.fetchval(add)

        async def race(i: int, conn: asyncpg.Connection) -> int:
            if i % 2:
                return int(await conn.fetchval(add))
            async with conn.transaction():
                labels = {"region": "e"}
                return await add_job_async(
                    conn, "receipt", {"order": 1}, labels=labels, job_key="fresh"
                )

        tasks = [asyncio.create_task(race(i, c)) for i, c in enumerate(racers)]
        pids = [c.get_server_pid() for c in racers]

        async def all_wait() -> bool:
            query = (
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE pid = ANY($1) AND wait_event_type = 'Lock'"
            )
            return await watcher.fetchval(query, pids) == RACERS

        await eventually(all_wait)
        await holding.commit()
        assert await asyncio.gather(*tasks) == [kept] * RACERS
        assert await watcher.fetchval("SELECT count(*) FROM hipq_jobs") == 1
    finally:
        for conn in (first, watcher, *racers):
            await conn.close()
        await svc.stop()


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        ("job_key => 'k', job_key_mode => 'keep'", "job_key_mode", "must be one of replace"),
        ("job_key => 'k', unique_for => interval '-5 s'", "unique_for", "greater than zero"),
        ("unique_for => interval '1 h'", "unique_for", "needs a job_key"),
        ("job_key => '..'", "job_key", "cannot be '.' or '..'"),
        ("flags => ARRAY['']", "flags[0]", "must be a flag name"),
    ],
)
async def test_sql_refuses_bad_keys_naming_the_field(
    postgres_url_fresh: str, args: str, field: str, message: str
) -> None:
    svc = await started(postgres_url_fresh)
    conn = await asyncpg.connect(urls(postgres_url_fresh)["libpq"])
    try:
        with pytest.raises(asyncpg.PostgresError) as caught:
            await conn.fetchval(ADD_SQL.format(order=1, labels=LABELS_SQL, args=args))
        assert caught.value.sqlstate == "HQ422"
        assert caught.value.column_name == field  # type: ignore[attr-defined]
        assert message in caught.value.detail  # type: ignore[attr-defined]
    finally:
        await conn.close()
        await svc.stop()


async def test_transactional_refuses_a_bad_key_naming_the_field(service: Service) -> None:
    engine = create_async_engine(service.settings.database_url)
    try:
        with pytest.raises(EnqueueError) as caught:
            async with engine.begin() as conn:
                await add_job_async(
                    conn, "receipt", {"order": 1}, labels=LABELS, job_key="k", unique_for=-5
                )
    finally:
        await engine.dispose()
    assert (caught.value.field, caught.value.message) == (
        "unique_for",
        "must be greater than zero and at most 3650d",
    )
