"""Several `hipq serve` processes on one PostgreSQL share the queues: each runs about
its fair share within two lease periods of a process joining or leaving, a SIGTERM
hands its queues over without running a job twice, a SIGKILL's queues move once its
leases expire, and a process limited with --queues runs only those.

The figures (time to converge, time for a dead process's queues to move) are
printed; run with -s to see them.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import HipqServer, Servers, wait_for, write_config
from tests.e2e.e2e_handlers import read_runs
from tests.services import create_database_sync, drop_database_sync, unique_database_name

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

QUEUES = [f"q{i}" for i in range(9)]
LEASE_TTL = 3.0
JOBS_PER_QUEUE = 12


@pytest.fixture
def database(postgres_admin_url: str) -> Any:
    name = unique_database_name("hipq_e2e")
    url = create_database_sync(postgres_admin_url, name)
    try:
        yield url
    finally:
        drop_database_sync(postgres_admin_url, name)


def config_for(tmp_path: Path, url: str, **overrides: Any) -> Path:
    queues = {q: {"concurrency": 4, "batch_interval": "200ms"} for q in QUEUES}
    job_types = {
        "record": {
            "queue": "q0",
            "transport": {"python": {"handler": "tests.e2e.e2e_handlers:record"}},
        }
    }
    return write_config(
        tmp_path / "hipq.yaml",
        url,
        queues=queues,
        job_types=job_types,
        lease_ttl=f"{LEASE_TTL:g}s",
        shutdown_grace="10s",
        **overrides,
    )


def owners(server: HipqServer) -> dict[str, int | None]:
    """queue -> the pid of its live owner (None: no owner)."""
    out: dict[str, int | None] = {}
    for q in server.get("/v1/queues")["queues"]:
        owner = q["owner"]
        out[q["name"]] = int(owner.rsplit(":", 2)[1]) if owner else None
    return out


def balanced(server: HipqServer, pids: list[int], low: int, high: int) -> bool:
    found = owners(server)
    if any(pid is None for pid in found.values()):
        return False
    counts = Counter(found.values())
    return set(counts) == set(pids) and all(low <= counts[p] <= high for p in pids)


def test_three_processes_share_nine_queues_and_take_over_on_stop_and_on_kill(
    database: str, servers: Servers, tmp_path: Path
) -> None:
    config = config_for(tmp_path, database)
    a = servers.start("a", config, work_ms=300)
    wait_for(lambda: balanced(a, [a.pid], 9, 9), 3 * LEASE_TTL, "a runs every queue")
    b = servers.start("b", config, work_ms=300)
    c = servers.start("c", config, work_ms=300)
    joined = time.monotonic()
    pids = [a.pid, b.pid, c.pid]
    wait_for(
        lambda: balanced(a, pids, 2, 4),
        2 * LEASE_TTL + 3,
        "each of 3 processes runs 2 to 4 of the 9 queues",
        describe=lambda: f"{owners(a)}\n{a.describe()}\n{b.describe()}\n{c.describe()}",
    )
    print(f"\nconverged {time.monotonic() - joined:.2f}s after the third process was ready")

    listed = b.get("/v1/processes")["processes"]
    assert sorted(p["pid"] for p in listed) == sorted(pids)
    assert sorted(q for p in listed for q in p["owned"]) == QUEUES
    assert all(p["queues"] == QUEUES for p in listed)

    # Work in every queue, then SIGTERM one process while its jobs run: its queues
    # are handed over and no job runs twice.
    body = {
        "jobs": [
            {"type": "record", "queue": q, "payload": {"n": n}}
            for q in QUEUES
            for n in range(JOBS_PER_QUEUE)
        ]
    }
    ids = [ref["id"] for ref in a.post("/v1/jobs/batch", body)["jobs"]]
    wait_for(
        lambda: any(pid == b.pid for _j, _a, pid in read_runs(servers.runs_file)), 30, "b runs"
    )
    b.process.send_signal(signal.SIGTERM)
    assert b.process.wait(timeout=30) == 0, b.describe()
    stopped = time.monotonic()
    wait_for(
        lambda: balanced(a, [a.pid, c.pid], 3, 6),
        2 * LEASE_TTL + 3,
        "b's queues taken by a and c",
        describe=lambda: str(owners(a)),
    )
    print(f"b's queues taken {time.monotonic() - stopped:.2f}s after its SIGTERM exit")

    def all_done() -> bool:
        queues = a.get("/v1/queues")["queues"]
        return all(q["scheduled"] + q["running"] + q["awaiting"] == 0 for q in queues)

    wait_for(all_done, 60, "every job done", describe=a.describe)
    runs = Counter(job_id for job_id, _attempt, _pid in read_runs(servers.runs_file))
    assert set(runs) == set(ids)
    assert [j for j, n in runs.items() if n > 1] == [], "a job ran twice across the SIGTERM"

    # SIGKILL: c's leases expire after lease_ttl and a takes every queue.
    c.kill()
    killed = time.monotonic()
    wait_for(
        lambda: balanced(a, [a.pid], 9, 9),
        LEASE_TTL + 2 * LEASE_TTL / 3 + 3,
        "a runs every queue after c's kill",
        describe=lambda: str(owners(a)),
    )
    print(f"c's queues moved {time.monotonic() - killed:.2f}s after its SIGKILL")
    assert [p["pid"] for p in a.get("/v1/processes")["processes"]] == [a.pid]


def test_a_process_limited_to_some_queues_runs_only_those(
    database: str, servers: Servers, tmp_path: Path
) -> None:
    config = config_for(tmp_path, database)
    a = servers.start("a", config, args=("--queues", "q1,q2"))
    b = servers.start("b", config)
    wait_for(
        lambda: balanced(b, [a.pid, b.pid], 1, 8),
        2 * LEASE_TTL + 3,
        "both processes run queues",
        describe=lambda: str(owners(b)),
    )
    found = owners(b)
    assert {q for q, pid in found.items() if pid == a.pid} <= {"q1", "q2"}
    listed = {p["pid"]: p for p in b.get("/v1/processes")["processes"]}
    assert listed[a.pid]["queues"] == ["q1", "q2"]


def queue_gauges(server: HipqServer, name: str) -> dict[str, float]:
    """queue -> the value of the gauge ``name`` in this process's /metrics."""
    text = server.client.get("/metrics").text
    return {
        sample.labels["queue"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_each_process_exports_the_gauges_of_the_queues_it_owns(
    database: str, servers: Servers, tmp_path: Path
) -> None:
    config = config_for(tmp_path, database, metrics_interval="300ms")
    a = servers.start("a", config)
    b = servers.start("b", config)
    wait_for(
        lambda: balanced(b, [a.pid, b.pid], 4, 5),
        2 * LEASE_TTL + 3,
        "both processes run queues",
        describe=lambda: str(owners(b)),
    )
    for n in range(5):
        b.post("/v1/jobs", {"type": "record", "payload": {"n": n}, "run_in": "1h"})

    def summed() -> dict[str, float] | None:
        found = owners(b)
        by_process = {s.pid: queue_gauges(s, "hipq_queue_scheduled") for s in (a, b)}
        # Each process exports exactly the queues it owns: no queue twice, none missing.
        for pid, gauges in by_process.items():
            if set(gauges) != {q for q, owner in found.items() if owner == pid}:
                return None
        total = Counter[str]()
        for gauges in by_process.values():
            total.update(gauges)
        return dict(total) if total["q0"] == 5 else None

    total = wait_for(summed, 60, "the gauges of the owned queues", describe=lambda: str(owners(b)))
    # What an alert's sum by (queue) reads: every queue once, q0 with its 5 jobs.
    assert set(total) == set(QUEUES)
    assert total == {q: 5 if q == "q0" else 0 for q in QUEUES}
