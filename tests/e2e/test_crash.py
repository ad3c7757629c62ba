"""A `hipq serve` killed with SIGKILL loses no accepted job, and its queue carries on.

What a user checks after a crash: every job the API accepted is there and ends
`completed`, nothing stays `scheduled` or `running`, and a job runs again only if
it was in flight when the process died (at-least-once, never silently dropped).
On PostgreSQL a second process takes the queue over once the dead owner's lease
expires, and NOTIFY wakes the owner for jobs posted to another process. A SIGTERM
stop hands the queue over at once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from hipq.store import Store
from hipq.store.schema import jobs, queues
from tests.e2e.conftest import HipqServer, Servers, wait_for, write_config
from tests.e2e.e2e_handlers import read_runs
from tests.services import create_database_sync, drop_database_sync, unique_database_name

pytestmark = pytest.mark.e2e

TOTAL = 2000
BATCH = 200
CONCURRENCY = 50
WORK_MS = 20
OPEN_STATES = ("scheduled", "running", "awaiting")


# -- talking to the servers ------------------------------------------------------------


def post_jobs(servers: list[HipqServer], total: int) -> list[int]:
    """POST ``total`` record jobs in batches, round-robin over ``servers``; their ids.

    The queue is paused meanwhile, so that the kill lands in the middle of the work
    however fast or slow the posting is.
    """
    servers[0].post("/v1/queues/default/pause", {})
    ids: list[int] = []
    for n, start in enumerate(range(0, total, BATCH)):
        body = {
            "jobs": [
                {"type": "record", "payload": {"n": i}}
                for i in range(start, min(start + BATCH, total))
            ]
        }
        out = servers[n % len(servers)].post("/v1/jobs/batch", body)
        assert out["count"] == len(body["jobs"])
        ids.extend(ref["id"] for ref in out["jobs"])
    assert len(set(ids)) == total
    assert queue(servers[-1])["scheduled"] == total
    servers[-1].post("/v1/queues/default/resume", {})
    return ids


def queue(server: HipqServer) -> dict[str, Any]:
    return server.get("/v1/queues/default")


def still_open(q: dict[str, Any]) -> int:
    return q["scheduled"] + q["running"] + q["awaiting"]


def owner_pid(server: HipqServer) -> int | None:
    """The pid in the queue's lease owner (``host:pid:nonce``), if the lease is live."""
    owner = queue(server)["owner"]
    return int(owner.rsplit(":", 2)[1]) if owner else None


def midway(server: HipqServer, total: int) -> bool:
    """Some jobs completed, many still to go: the moment to pull the plug."""
    q = queue(server)
    done = total - still_open(q) - q["failed"]
    return total // 5 <= done and still_open(q) > total // 4


def drained(server: HipqServer) -> dict[str, Any] | None:
    q = queue(server)
    return q if still_open(q) == 0 else None


def job_ids(server: HipqServer, state: str) -> list[int]:
    """Every job in ``state``, through the list endpoint's cursor."""
    out: list[int] = []
    params: dict[str, Any] = {"state": state, "limit": 1000}
    while True:
        page = server.get("/v1/jobs", params=params)
        out.extend(j["id"] for j in page["jobs"])
        if page["next_cursor"] is None:
            return out
        params["cursor"] = page["next_cursor"]


def assert_all_completed(server: HipqServer, ids: list[int]) -> None:
    completed = job_ids(server, "completed")
    assert len(completed) == len(set(completed))
    missing = set(ids) - set(completed)
    assert not missing, f"{len(missing)} accepted jobs not completed: {sorted(missing)[:10]}"
    assert set(completed) == set(ids)
    for state in (*OPEN_STATES, "failed", "cancelled"):
        assert job_ids(server, state) == [], f"jobs left {state}"


# -- what the database held when the process died ----------------------------------------


@dataclass
class Snapshot:
    states: Counter[str]
    running: set[int]
    lease_owner: str | None


def db_snapshot(database_url: str) -> Snapshot:
    """Jobs first, then the lease: a lease still held by the dead process proves that
    nobody had taken over (and changed a job) before the jobs were read."""

    async def read() -> Snapshot:
        store = Store.from_url(database_url)
        try:
            async with store.engine.connect() as conn:
                rows = (await conn.execute(select(jobs.c.id, jobs.c.state))).all()
                lease_owner = (
                    await conn.execute(
                        select(queues.c.lease_owner).where(queues.c.name == "default")
                    )
                ).scalar_one_or_none()
        finally:
            await store.close()
        return Snapshot(
            Counter(r.state for r in rows),
            {r.id for r in rows if r.state == "running"},
            lease_owner,
        )

    return asyncio.run(read())


def check_runs(
    runs_file: Path, ids: list[int], killed: HipqServer, survivor: HipqServer, at_kill: Snapshot
) -> set[int]:
    """Every job ran; only jobs in flight at the kill ran twice, and those ran again in
    the survivor. Returns the ids that ran more than once."""
    by_job: dict[int, list[int]] = defaultdict(list)
    for job_id, _attempt, pid in read_runs(runs_file):
        by_job[job_id].append(pid)
    assert set(by_job) == set(ids), "a job ran that was never accepted, or one never ran"
    assert {pid for pids in by_job.values() for pid in pids} <= {killed.pid, survivor.pid}
    reran = {j for j, pids in by_job.items() if len(pids) > 1}
    assert reran <= at_kill.running, (
        f"jobs ran twice without being in flight at the kill: {sorted(reran - at_kill.running)}"
    )
    # At-least-once: whatever was `running` when the process died ran in the survivor.
    not_resumed = {j for j in at_kill.running if survivor.pid not in by_job[j]}
    assert not not_resumed, f"in flight at the kill, never run again: {sorted(not_resumed)[:10]}"
    assert all(len(pids) <= 2 for pids in by_job.values())
    return reran


def kill_midway(
    server: HipqServer,
    watch: HipqServer,
    database_url: str,
    total: int = TOTAL,
    graceful: bool = False,
) -> Snapshot:
    wait_for(
        lambda: midway(watch, total),
        60,
        "some but not all jobs completed",
        interval=0.01,
        describe=server.describe,
    )
    if graceful:
        server.process.terminate()
        assert server.process.wait(timeout=20) == 0, server.describe()
    else:
        server.kill()
    at_kill = db_snapshot(database_url)
    assert at_kill.states["completed"] < total, "every job finished before the kill"
    if graceful:
        # SIGTERM let the jobs in flight finish (tests/e2e/test_stop.py): none is left
        # `running`, so none runs again.
        assert at_kill.running == set(), at_kill
    else:
        # The test is only worth something if the kill caught work in flight.
        assert 0 < len(at_kill.running) <= CONCURRENCY, at_kill
    return at_kill


# -- the tests -----------------------------------------------------------------------------


def test_sqlite_sigkill_mid_work_loses_no_job(servers: Servers, tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}"
    # The restarted process waits for the dead one's lease to expire: keep that short.
    config = write_config(tmp_path / "hipq.yaml", url, lease_ttl="3s")
    first = servers.start("first", config, work_ms=WORK_MS)
    ids = post_jobs([first], TOTAL)

    at_kill = kill_midway(first, first, url)
    assert at_kill.lease_owner is not None and f":{first.pid}:" in at_kill.lease_owner

    # Same file, new process: it takes the queue once the dead owner's lease expires.
    started = time.monotonic()
    second = servers.start("second", config, work_ms=WORK_MS)
    q = wait_for(
        lambda: drained(second),
        60,
        "every job settled after the restart",
        interval=0.1,
        describe=second.describe,
    )
    took = time.monotonic() - started
    assert q["failed"] == 0
    assert_all_completed(second, ids)

    reran = check_runs(servers.runs_file, ids, first, second, at_kill)
    print(
        f"sqlite: {len(at_kill.running)} in flight at the kill, {len(reran)} ran twice, "
        f"{at_kill.states['completed']} completed before it; restart drained in {took:.1f}s"
    )


def test_sqlite_sigterm_hands_the_queue_over_at_once(servers: Servers, tmp_path: Path) -> None:
    """A stop by SIGTERM (systemd, docker) releases the queue's lease, so the next
    process starts at once instead of waiting out the 15 s default lease_ttl."""
    total = 400
    # Longer jobs than the other tests: the stop must land while work is left (at
    # least 100 jobs, two rounds of the capacity), however long uvicorn takes from
    # the signal to the service's shutdown.
    work_ms = 200
    url = f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}"
    config = write_config(tmp_path / "hipq.yaml", url)
    first = servers.start("first", config, work_ms=work_ms)
    ids = post_jobs([first], total)

    at_stop = kill_midway(first, first, url, total, graceful=True)
    assert at_stop.lease_owner is None, "SIGTERM left the queue's lease held"

    second = servers.start("second", config, work_ms=work_ms)
    # A held lease would have kept it waiting for about 15 s (its next try: in 5 s).
    wait_for(
        lambda: owner_pid(second) == second.pid,
        3,
        "the new process owns the queue",
        describe=second.describe,
    )
    q = wait_for(
        lambda: drained(second),
        60,
        "every job settled after the restart",
        interval=0.1,
        describe=second.describe,
    )
    assert q["failed"] == 0
    assert_all_completed(second, ids)
    # The stop cut nothing off (at_stop.running is empty): no job ran twice.
    assert check_runs(servers.runs_file, ids, first, second, at_stop) == set()


@pytest.mark.postgres
def test_postgres_survivor_takes_over_the_killed_owners_queue(
    servers: Servers, tmp_path: Path, postgres_admin_url: str
) -> None:
    name = unique_database_name("hipq_e2e")
    url = create_database_sync(postgres_admin_url, name)
    try:
        config = write_config(tmp_path / "hipq.yaml", url, lease_ttl="2s")
        # One after the other: the first applies the migrations, the second finds them done.
        a = servers.start("a", config, work_ms=WORK_MS)
        b = servers.start("b", config, work_ms=WORK_MS)
        pid = wait_for(lambda: owner_pid(a), 60, "a queue owner")
        owner, survivor = (a, b) if pid == a.pid else (b, a)
        assert pid == owner.pid

        ids = post_jobs([a, b], TOTAL)
        at_kill = kill_midway(owner, survivor, url)
        assert at_kill.lease_owner is not None and f":{owner.pid}:" in at_kill.lease_owner, (
            "the lease moved before the kill was observed"
        )

        killed_at = time.monotonic()
        wait_for(
            lambda: owner_pid(survivor) == survivor.pid,
            60,
            "the survivor owns the queue",
            interval=0.05,
            describe=survivor.describe,
        )
        takeover = time.monotonic() - killed_at
        q = wait_for(
            lambda: drained(survivor),
            60,
            "every job settled after the takeover",
            interval=0.1,
            describe=survivor.describe,
        )
        assert q["failed"] == 0
        assert owner_pid(survivor) == survivor.pid
        assert_all_completed(survivor, ids)

        reran = check_runs(servers.runs_file, ids, owner, survivor, at_kill)
        print(
            f"postgres: takeover after {takeover:.1f}s; {len(at_kill.running)} in flight at "
            f"the kill, {len(reran)} ran twice"
        )
    finally:
        servers.close()
        drop_database_sync(postgres_admin_url, name)


@pytest.mark.postgres
def test_postgres_notify_wakes_the_owner_for_jobs_posted_elsewhere(
    servers: Servers, tmp_path: Path, postgres_admin_url: str
) -> None:
    """The owner sleeps up to min(batch_interval, lease_ttl / 3) = 20 s between ticks
    here; a job posted to the other process completes in well under that only if
    that process's NOTIFY woke it."""
    name = unique_database_name("hipq_e2e")
    url = create_database_sync(postgres_admin_url, name)
    try:
        config = write_config(
            tmp_path / "hipq.yaml",
            url,
            lease_ttl="60s",
            queues={"default": {"concurrency": CONCURRENCY, "batch_interval": "30s"}},
        )
        a = servers.start("a", config, work_ms=1)
        b = servers.start("b", config, work_ms=1)
        pid = wait_for(lambda: owner_pid(a), 60, "a queue owner")
        owner, other = (a, b) if pid == a.pid else (b, a)

        latencies = []
        for i in range(3):
            time.sleep(0.3)  # the owner's loop is asleep again after the previous job
            started = time.monotonic()
            job_id = other.post("/v1/jobs", {"type": "record", "payload": {"n": i}})["id"]
            wait_for(
                lambda j=job_id: other.get(f"/v1/jobs/{j}")["state"] == "completed",
                60,
                f"job {job_id} posted to the non-owner completed (NOTIFY wake-up)",
                interval=0.01,
                describe=owner.describe,
            )
            latencies.append(time.monotonic() - started)
        assert max(latencies) < 3.0, latencies
        runs = read_runs(servers.runs_file)
        assert [pid for _job, _attempt, pid in runs] == [owner.pid] * 3
        print(
            f"postgres NOTIFY: job posted to the non-owner completed in "
            f"{', '.join(f'{t * 1000:.0f}ms' for t in latencies)}"
        )
    finally:
        servers.close()
        drop_database_sync(postgres_admin_url, name)
