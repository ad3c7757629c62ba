"""SIGTERM drains `hipq serve`: nothing new is claimed, the jobs in flight run to their
end and are recorded, and the next process runs none of them again. A second signal,
or the end of `shutdown_grace`, stops at once and leaves the cut-off jobs to the next
owner (at-least-once kept)."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.conftest import HipqServer, Servers, wait_for, write_config
from tests.e2e.e2e_handlers import read_runs
from tests.e2e.test_crash import assert_all_completed, db_snapshot, drained, queue
from tests.services import create_database_sync, drop_database_sync, unique_database_name

pytestmark = pytest.mark.e2e

CONCURRENCY = 8
TOTAL = 24


def post_and_fill(server: HipqServer, work_ms: int) -> list[int]:
    """TOTAL record jobs; returns once CONCURRENCY of them run (and the rest wait)."""
    body = {"jobs": [{"type": "record", "payload": {"n": i}} for i in range(TOTAL)]}
    ids = [ref["id"] for ref in server.post("/v1/jobs/batch", body)["jobs"]]
    wait_for(
        lambda: queue(server)["running"] == CONCURRENCY,
        60,
        "the queue full of running jobs",
        describe=server.describe,
    )
    return ids


def config_for(tmp_path: Path, url: str, **overrides: object) -> Path:
    queues = {"default": {"concurrency": CONCURRENCY, "batch_interval": "100ms"}}
    return write_config(tmp_path / "hipq.yaml", url, queues=queues, **overrides)


def signal_and_wait(server: HipqServer, limit: float, signals: int = 1) -> None:
    for n in range(signals):
        if n:  # the second signal once the first one's drain is under way
            wait_for(lambda: "stopping" in server.log_tail(), 60, "the first signal seen")
        server.process.send_signal(signal.SIGTERM)
    try:
        code = server.process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"running {limit:g}s after SIGTERM\n{server.describe()}") from None
    assert code == 0, server.describe()


def runs_by_job(servers: Servers) -> Counter[int]:
    return Counter(job_id for job_id, _attempt, _pid in read_runs(servers.runs_file))


def sigterm_lets_running_jobs_finish(servers: Servers, tmp_path: Path, url: str) -> None:
    work_ms = 800
    config = config_for(tmp_path, url)
    first = servers.start("first", config, work_ms=work_ms)
    ids = post_and_fill(first, work_ms)
    started = set(runs_by_job(servers))

    signal_and_wait(first, limit=25 + 5)
    at_stop = db_snapshot(url)
    assert at_stop.lease_owner is None, "SIGTERM left the queue's lease held"
    assert at_stop.running == set(), f"jobs cut off by SIGTERM: {sorted(at_stop.running)}"
    ran_first = set(runs_by_job(servers))
    assert started <= ran_first
    # Every job that ran before the stop finished and was recorded; nothing more was
    # claimed once the signal came (no tick dispatched to a stopping process).
    assert at_stop.states["completed"] == len(ran_first)
    assert at_stop.states["scheduled"] == TOTAL - len(ran_first) > 0

    second = servers.start("second", config, work_ms=50)
    wait_for(lambda: drained(second), 60, "every job settled", describe=second.describe)
    assert_all_completed(second, ids)
    runs = runs_by_job(servers)
    assert set(runs) == set(ids)
    twice = sorted(j for j, n in runs.items() if n > 1)
    assert not twice, f"jobs run again after the SIGTERM: {twice}"


def test_sqlite_sigterm_lets_running_jobs_finish_and_none_runs_again(
    servers: Servers, tmp_path: Path
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}"
    sigterm_lets_running_jobs_finish(servers, tmp_path, url)


@pytest.mark.postgres
def test_postgres_sigterm_lets_running_jobs_finish_and_none_runs_again(
    servers: Servers, tmp_path: Path, postgres_admin_url: str
) -> None:
    name = unique_database_name("hipq_e2e")
    url = create_database_sync(postgres_admin_url, name)
    try:
        sigterm_lets_running_jobs_finish(servers, tmp_path, url)
    finally:
        servers.close()
        drop_database_sync(postgres_admin_url, name)


def cut_off_then_rerun(
    servers: Servers, tmp_path: Path, signals: int, **config: object
) -> HipqServer:
    """Jobs far longer than the stop may wait: cut off, still `running`, then run again
    (and completed) by the next process. Returns the process that was stopped."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}"
    first = servers.start("first", config_for(tmp_path, url, **config), work_ms=20_000)
    ids = post_and_fill(first, 20_000)
    cut_off = set(runs_by_job(servers))
    assert len(cut_off) == CONCURRENCY

    signal_and_wait(first, limit=10, signals=signals)
    at_stop = db_snapshot(url)
    assert at_stop.lease_owner is None
    assert at_stop.running == cut_off, "the cut-off jobs are left `running` for the next owner"

    second = servers.start("second", config_for(tmp_path, url), work_ms=50)
    wait_for(lambda: drained(second), 60, "every job settled", describe=second.describe)
    assert_all_completed(second, ids)
    runs = runs_by_job(servers)
    assert {j for j, n in runs.items() if n == 2} == cut_off
    assert all(runs[j] == 1 for j in set(ids) - cut_off)
    return first


def test_a_second_sigterm_stops_at_once(servers: Servers, tmp_path: Path) -> None:
    # The 25 s default grace would wait for the 20 s jobs, beyond the exit's 10 s limit.
    cut_off_then_rerun(servers, tmp_path, signals=2)


def test_the_end_of_the_grace_stops_and_the_next_start_reruns(
    servers: Servers, tmp_path: Path
) -> None:
    stopped = cut_off_then_rerun(
        servers, tmp_path, signals=1, shutdown_grace="2s", log_level="info"
    )
    # The log tells the stop as it happens: the wait announced, its progress, what it
    # cut off, and "stopped" last; nothing says the process finished before it has.
    lines = [line for line in stopped.log_tail(lines=10_000).splitlines() if line.strip()]
    waiting = next(i for i, line in enumerate(lines) if "waiting up to" in line)
    assert "jobs in flight" in lines[waiting], lines[waiting]
    progress = [line for line in lines[waiting:] if "still in flight; waiting up to" in line]
    assert progress, "\n".join(lines[waiting:])
    assert any("stopping at the end of the grace" in line for line in lines[waiting:])
    assert not any("Finished server process" in line for line in lines), "\n".join(lines)
    assert lines[-1].endswith("stopped"), "\n".join(lines[waiting:])
