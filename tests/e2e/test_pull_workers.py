"""Pull workers end to end: `hipq worker` subprocesses fetching from `hipq serve`
subprocesses, on SQLite and on PostgreSQL with two servers; a graceful stop, and a
worker killed mid-job whose job is retried by another."""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import HIPQ, REPO, HipqServer, Servers, wait_for, write_config
from tests.e2e.e2e_handlers import RUNS_FILE_ENV, WORK_MS_ENV, read_runs
from tests.services import create_database_sync, drop_database_sync, unique_database_name

pytestmark = pytest.mark.e2e

HANDLER = "tests.e2e.e2e_handlers:record"
PULL_TYPES = {
    "crunch": {
        "transport": "pull",
        "retry": {"strategy": "fixed", "delay": "0s", "max_attempts": 5},
    },
    # Heartbeated by its worker every second: a dead worker's job moves within 3 s.
    "long_crunch": {
        "transport": "pull",
        "heartbeat_timeout": "3s",
        "retry": {"strategy": "fixed", "delay": "0s", "max_attempts": 5},
    },
}


class Workers:
    """`hipq worker` subprocesses of one test, killed at its end."""

    def __init__(self, tmp_path: Path, runs_file: Path) -> None:
        self.tmp_path, self.runs_file = tmp_path, runs_file
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(
        self, server: HipqServer, types: str = "crunch", work_ms: int = 20, *args: str
    ) -> subprocess.Popen[bytes]:
        log = self.tmp_path / f"worker{len(self.started)}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
                RUNS_FILE_ENV: str(self.runs_file),
                WORK_MS_ENV: str(work_ms),
            }
        )
        command = [str(HIPQ), "worker", "--types", types, "--handler", HANDLER]
        command += ["--url", server.url, "--wait", "5", *args]
        with open(log, "ab") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.tmp_path
            )
        self.started.append((process, log))
        return process

    def close(self) -> None:
        for process, log in self.started:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
            print(f"--- worker pid {process.pid}:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def workers(tmp_path: Path, servers: Servers) -> Iterator[Workers]:
    started = Workers(tmp_path, servers.runs_file)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def pg_database(postgres_admin_url: str) -> Iterator[str]:
    name = unique_database_name("hipq_pull")
    url = create_database_sync(postgres_admin_url, name)
    try:
        yield url
    finally:
        drop_database_sync(postgres_admin_url, name)


def config(tmp_path: Path, url: str, **overrides: Any) -> Path:
    return write_config(
        tmp_path / "hipq.yaml",
        url,
        queues={"default": {"concurrency": 8, "batch_interval": "200ms"}},
        job_types=PULL_TYPES,
        **overrides,
    )


def post(server: HipqServer, count: int, type: str = "crunch") -> list[int]:
    jobs = [{"type": type, "payload": {"i": i}} for i in range(count)]
    return [j["id"] for j in server.post("/v1/jobs/batch", {"jobs": jobs})["jobs"]]


def all_completed(server: HipqServer, ids: list[int]) -> bool:
    return all(server.get(f"/v1/jobs/{i}")["state"] == "completed" for i in ids)


def test_hipq_worker_runs_jobs_and_stops_gracefully(
    tmp_path: Path, servers: Servers, workers: Workers
) -> None:
    server = servers.start("a", config(tmp_path, f"sqlite+aiosqlite:///{tmp_path}/hipq.db"))
    worker = workers.start(server)
    ids = post(server, 20)
    wait_for(lambda: all_completed(server, ids), 60, "20 jobs completed by the worker")
    runs = read_runs(servers.runs_file)
    # Run by the worker, not by the server; once each.
    assert {pid for _job, _attempt, pid in runs} == {worker.pid}
    assert sorted(job for job, _a, _p in runs) == sorted(ids)
    assert server.get(f"/v1/jobs/{ids[0]}")["result"] == {"pid": worker.pid}

    # A slow job under way when SIGTERM arrives finishes and reports before the worker exits.
    slow_worker = workers.start(server, "long_crunch", 3000)
    [slow] = post(server, 1, "long_crunch")
    wait_for(lambda: any(job == slow for job, _a, _p in read_runs(servers.runs_file)), 60, "run")
    slow_worker.send_signal(signal.SIGTERM)
    assert slow_worker.wait(timeout=60) == 0
    assert wait_for(lambda: all_completed(server, [slow]), 60, "the slow job completed")
    assert [r for r in read_runs(servers.runs_file) if r[0] == slow] == [(slow, 1, slow_worker.pid)]
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0


def test_hipq_worker_concurrency_counts_weight(
    tmp_path: Path, servers: Servers, workers: Workers
) -> None:
    """--concurrency 3 runs one job of weight 2 and one of weight 1 at once, never two
    of weight 2 (whose weights would add up to 4)."""
    server = servers.start("a", config(tmp_path, f"sqlite+aiosqlite:///{tmp_path}/hipq.db"))
    heavy = [{"type": "crunch", "weight": 2} for _ in range(4)]
    light = [{"type": "crunch", "weight": 1} for _ in range(4)]
    posted = server.post("/v1/jobs/batch", {"jobs": heavy + light})["jobs"]
    weights = {j["id"]: (2 if i < 4 else 1) for i, j in enumerate(posted)}
    handler = "tests.e2e.e2e_handlers:record_span"
    worker = workers.start(server, "crunch", 150, "--concurrency", "3", "--handler", handler)
    ids = list(weights)
    wait_for(lambda: all_completed(server, ids), 120, "8 jobs completed by the worker")
    spans = (Path(f"{servers.runs_file}.spans")).read_text().split()
    load, peak = 0, 0
    for job_id, mark in zip(spans[::2], spans[1::2], strict=True):
        load += weights[int(job_id)] if mark == "start" else -weights[int(job_id)]
        peak = max(peak, load)
    assert peak <= 3
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0


def test_hipq_worker_imports_its_handler_from_the_directory_it_starts_in(
    tmp_path: Path, servers: Servers
) -> None:
    """As docs/howto-pull-workers.md shows it: `myapp/images.py` beside the worker, no
    PYTHONPATH; and its log does not list every request it makes."""
    server = servers.start("a", config(tmp_path, f"sqlite+aiosqlite:///{tmp_path}/hipq.db"))
    app = tmp_path / "app"
    (app / "myapp").mkdir(parents=True)
    (app / "myapp" / "__init__.py").write_text("")
    (app / "myapp" / "images.py").write_text(
        "async def thumbnail(job):\n    return {'thumb': job.payload['i']}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIPQ_", "PYTHON"))}
    command = [str(HIPQ), "worker", "--types", "crunch", "--handler", "myapp.images:thumbnail"]
    log = tmp_path / "worker.log"
    with open(log, "ab") as out:
        worker = subprocess.Popen(
            [*command, "--url", server.url, "--wait", "1"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=app,
        )
    try:
        ids = post(server, 3)
        wait_for(lambda: all_completed(server, ids), 60, "3 jobs completed by the worker")
        assert [server.get(f"/v1/jobs/{i}")["result"] for i in ids] == [
            {"thumb": 0},
            {"thumb": 1},
            {"thumb": 2},
        ]
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    text = log.read_text(errors="replace")
    # Its URL once, in the start line; no line per request.
    assert "HTTP Request" not in text, text
    assert sum(server.url in line for line in text.splitlines()) == 1, text


def test_hipq_worker_refuses_bad_input_in_one_line(tmp_path: Path, servers: Servers) -> None:
    server = servers.start("a", config(tmp_path, f"sqlite+aiosqlite:///{tmp_path}/hipq.db"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = str(REPO)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(HIPQ), "worker", "--url", server.url, *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    unknown = run("--types", "nope", "--handler", HANDLER)
    assert unknown.returncode != 0
    assert unknown.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "types[0]" in unknown.stderr and "nope" in unknown.stderr
    bad_handler = run("--types", "crunch", "--handler", "no.such.module:fn")
    assert bad_handler.returncode != 0
    assert bad_handler.stderr.strip().splitlines() == [
        line for line in bad_handler.stderr.strip().splitlines() if line.startswith("error: ")
    ]


@pytest.mark.postgres
def test_two_servers_on_postgresql_and_a_worker_killed_mid_job(
    tmp_path: Path, servers: Servers, workers: Workers, pg_database: str
) -> None:
    path = config(tmp_path, pg_database, lease_ttl="3s")
    one = servers.start("one", path)
    two = servers.start("two", path)
    first = workers.start(one)
    second = workers.start(two)
    ids = post(one, 30) + post(two, 30)
    wait_for(lambda: all_completed(one, ids), 120, "60 jobs completed by two workers")
    runs = read_runs(servers.runs_file)
    assert Counter(job for job, _a, _p in runs) == Counter(ids)  # each ran once
    assert {pid for _j, _a, pid in runs} <= {first.pid, second.pid}

    # A worker killed mid-job: its heartbeats stop, the job times out after the
    # type's heartbeat_timeout and is retried by the other worker.
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=60) == 0
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0
    doomed = workers.start(one, "long_crunch", 600_000)
    [job] = post(two, 1, "long_crunch")
    wait_for(lambda: one.get(f"/v1/jobs/{job}").get("heartbeat"), 60, "a first heartbeat")
    doomed.kill()
    doomed.wait(timeout=10)
    rescuer = workers.start(two, "long_crunch", 20)
    wait_for(lambda: all_completed(one, [job]), 60, "the job retried and completed")
    shown = one.get(f"/v1/jobs/{job}")
    assert shown["attempt"] == 2
    assert "timed out" in shown["attempts"][0]["error"]
    assert [(a, p) for j, a, p in read_runs(servers.runs_file) if j == job] == [
        (1, doomed.pid),
        (2, rescuer.pid),
    ]
