"""One hot queue's sends spread over several `hipq serve` processes on one PostgreSQL:
its owner admits and claims, every live process sends a part, and the limits hold
at the receiver as they do with one process; a SIGKILL of a process sending handed
jobs loses none of them and repeats at most those it had in flight.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import HipqServer, Servers, wait_for, write_config
from tests.e2e.e2e_handlers import read_runs
from tests.e2e.receiver import Receiver
from tests.services import create_database_sync, drop_database_sync, unique_database_name

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

LEASE_TTL = 3.0
JOBS = 600  # the 3,000 scaled down to keep the suite short; the benchmark goes further
CONCURRENCY = 100
REGIONS = {"east": 40, "north": 30, "west": 30}  # percent of the concurrency
TENANTS = [f"t{i}" for i in range(10)]
PER_TENANT = 12  # weight in flight per tenant
RATE = 300  # claims per second


@pytest.fixture
def database(postgres_admin_url: str) -> Any:
    name = unique_database_name("hipq_e2e")
    url = create_database_sync(postgres_admin_url, name)
    try:
        yield url
    finally:
        drop_database_sync(postgres_admin_url, name)


def hot_config(tmp_path: Path, url: str, receiver: str) -> Path:
    throttlers = [
        {"share": {"label": "region", "shares": REGIONS}},
        {"per_key": {"key": "labels.tenant", "limit": PER_TENANT, "count": "weight"}},
        {"rate": {"limit": RATE, "per": "1s"}},
    ]
    job_types = {
        "send": {
            "queue": "hot",
            "correlation_key": "n{payload.n}",
            "outcome": {"field": "status", "success": ["ok"]},
            "timeout": "30s",
            "transport": {"http": {"url": f"{receiver}/work", "timeout": "10s"}},
        }
    }
    queues = {
        "hot": {
            "concurrency": CONCURRENCY,
            "batch_interval": "100ms",
            "hand_off_above": 0,
            "throttlers": throttlers,
        }
    }
    return write_config(
        tmp_path / "hot.yaml",
        url,
        queues=queues,
        job_types=job_types,
        lease_ttl=f"{LEASE_TTL:g}s",
        shutdown_grace="10s",
    )


def start(servers: Servers, config: Path, count: int, work_ms: int = 20) -> list[HipqServer]:
    started = [servers.start(name, config, work_ms=work_ms) for name in "abc"[:count]]
    pids = sorted(s.pid for s in started)
    wait_for(
        lambda: sorted(p["pid"] for p in started[0].get("/v1/processes")["processes"]) == pids,
        3 * LEASE_TTL,
        f"{count} processes registered",
    )
    time.sleep(LEASE_TTL / 3 + 0.5)  # every process's beat has seen the other two
    return started


def post_all(server: HipqServer, jobs: list[dict[str, Any]]) -> list[int]:
    ids: list[int] = []
    for i in range(0, len(jobs), 500):
        ids += [r["id"] for r in server.post("/v1/jobs/batch", {"jobs": jobs[i : i + 500]})["jobs"]]
    return ids


def queue_done(server: HipqServer, queue: str) -> bool:
    found = next(q for q in server.get("/v1/queues")["queues"] if q["name"] == queue)
    return found["scheduled"] + found["running"] + found["awaiting"] == 0


def listed(server: HipqServer, queue: str) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    cursor: str | None = None
    for _page in range(100):
        params: dict[str, Any] = {"queue": queue, "limit": 1000}
        if cursor:
            params["cursor"] = cursor
        page = server.get("/v1/jobs", params=params)
        jobs += page["jobs"]
        cursor = page["next_cursor"]
        if not cursor:
            return jobs
    raise AssertionError("more than 100 pages of jobs")


def most_claims_in_a_second(jobs: list[dict[str, Any]]) -> int:
    starts = sorted(datetime.fromisoformat(j["claimed_at"]).timestamp() for j in jobs)
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


def test_a_hot_queue_is_sent_by_every_process_within_its_limits(
    database: str, servers: Servers, tmp_path: Path
) -> None:
    with Receiver(hold=0.03) as receiver:
        config = hot_config(tmp_path, database, receiver.url)
        started = start(servers, config, 3)
        rng = random.Random(20)
        jobs = []
        for n in range(JOBS):
            region, tenant = rng.choice(list(REGIONS)), rng.choice(TENANTS)
            weight = rng.randint(1, 3)
            jobs.append(
                {
                    "type": "send",
                    "weight": weight,
                    "labels": {"region": region, "tenant": tenant},
                    "payload": {"n": n, "region": region, "tenant": tenant, "w": weight},
                }
            )
        began = time.monotonic()
        ids = post_all(started[1], jobs)
        wait_for(
            lambda: queue_done(started[0], "hot"),
            120,
            "every job done",
            interval=0.5,
            describe=lambda: "\n".join(s.describe() for s in started),
        )
        print(f"\n{JOBS} jobs by 3 processes in {time.monotonic() - began:.1f}s")
        found = listed(started[0], "hot")
        assert sorted(j["id"] for j in found) == sorted(ids)
        assert {j["state"] for j in found} == {"completed"}
        assert set(receiver.requests) == set(range(JOBS))
        assert receiver.callbacks_failed == 0

        # Every process sent at least a fifth.
        by_port = {s.port: receiver.by_port[s.port] for s in started}
        print("sent per process:", by_port, "peaks:", dict(receiver.peak))
        assert sum(by_port.values()) == sum(receiver.requests.values())
        assert all(n >= JOBS / 5 for n in by_port.values()), by_port

        # The limits, measured at the receiver, as with one process.
        assert 0 < receiver.peak["*"] <= CONCURRENCY
        for region, share in REGIONS.items():
            assert 0 < receiver.peak[f"region={region}"] <= CONCURRENCY * share // 100
        for tenant in TENANTS:
            assert 0 < receiver.peak[f"tenant={tenant}"] <= PER_TENANT
        assert most_claims_in_a_second(found) <= RATE


def test_a_sigkill_of_a_process_sending_handed_jobs_loses_none(
    database: str, servers: Servers, tmp_path: Path
) -> None:
    queues = {"hot": {"concurrency": 30, "batch_interval": "100ms", "hand_off_above": 0}}
    job_types = {
        "record": {
            "queue": "hot",
            "timeout": "60s",
            "transport": {"python": {"handler": "tests.e2e.e2e_handlers:record"}},
        }
    }
    config = write_config(
        tmp_path / "kill.yaml",
        database,
        queues=queues,
        job_types=job_types,
        lease_ttl=f"{LEASE_TTL:g}s",
        shutdown_grace="10s",
    )
    # Two processes: the queue's owner and the one killed while it sends handed jobs.
    started = start(servers, config, 2, work_ms=400)
    ids = post_all(started[0], [{"type": "record", "payload": {"n": n}} for n in range(160)])
    owner_pid = int(started[0].get("/v1/queues")["queues"][0]["owner"].rsplit(":", 2)[1])
    victim = next(s for s in started if s.pid != owner_pid)
    wait_for(
        lambda: sum(1 for _j, _a, pid in read_runs(servers.runs_file) if pid == victim.pid) >= 20,
        60,
        "the victim sends handed jobs",
    )
    victim.kill()
    alive = next(s for s in started if s.alive())
    wait_for(lambda: queue_done(alive, "hot"), 120, "every job done", interval=0.5)

    found = listed(alive, "hot")
    assert sorted(j["id"] for j in found) == sorted(ids)
    assert {j["state"] for j in found} == {"completed"}
    runs = read_runs(servers.runs_file)
    count = Counter(job_id for job_id, _attempt, _pid in runs)
    twice = {j for j, n in count.items() if n > 1}
    by_victim = {j for j, _a, pid in runs if pid == victim.pid}
    # Only jobs the victim had started ran again, at most as many as could be in flight.
    assert twice <= by_victim
    assert len(twice) <= 30
    print(f"\n{len(twice)} jobs ran again after the SIGKILL")
