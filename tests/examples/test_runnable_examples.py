"""The examples users run (examples/<name>/run.py), run as users run them: one command,
a real `hipq serve` underneath, exit status 0 when the example saw what it shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import create_database_sync, drop_database_sync, unique_database_name

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name / "run.py"), *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_a_simple_job() -> None:
    out = run_example("simple-job")
    assert "completed: {'greeting': 'hello, hipq'}" in out


def test_a_checkpointed_payload() -> None:
    out = run_example("checkpointed-payload")
    assert "attempt 1: retried RuntimeError: connection lost after 3 rows" in out
    assert "'resumed_at_row': 3" in out


ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def run_on_engine(name: str, engine: str, request: pytest.FixtureRequest) -> str:
    """The example on its own SQLite file, or with --database-url of a fresh database."""
    if engine == "sqlite":
        return run_example(name)
    admin = request.getfixturevalue("postgres_admin_url")
    database = unique_database_name("hipq_example")
    url = create_database_sync(admin, database)
    try:
        return run_example(name, "--database-url", url)
    finally:
        drop_database_sync(admin, database)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_transactional_enqueue(engine: str, request: pytest.FixtureRequest) -> None:
    out = run_on_engine("transactional-enqueue", engine, request)
    assert "order 2 rolled back (payment declined): no order, no job" in out
    assert "order 3 refused, rolled back: type: unknown job type 'send_reciept'" in out
    assert "orders stored: [1]; jobs stored: [1]" in out


@pytest.mark.parametrize("engine", ENGINES)
def test_hipq_inside_an_application(engine: str, request: pytest.FixtureRequest) -> None:
    out = run_on_engine("embedded-app", engine, request)
    assert "queue default, priority 10, timeout 120s (the job type's defaults)" in out
    assert "completed: {'sent_to': 'ada@example.com', 'subject': 'Welcome, ada'}" in out
    assert "refused: run_in: invalid duration 'soon'" in out
    assert "a batch of 3 jobs, 3 completed" in out
    assert out.rstrip().endswith("stopped")


def test_the_embedding_example_is_clean_for_mypy_strict(tmp_path: Path) -> None:
    """An application's own code that uses the Service (and the test helper) passes
    ``mypy --strict``, with hipq checked as an installed package is (silently)."""
    files = [
        EXAMPLES / "embedded-app" / "run.py",
        EXAMPLES / "embedded-app" / "signup_jobs.py",
        EXAMPLES / "testing-jobs" / "test_billing_jobs.py",
        EXAMPLES / "testing-jobs" / "billing_jobs.py",
    ]
    mypy = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent"]
    done = subprocess.run(
        [*mypy, "--cache-dir", str(tmp_path / "cache"), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # not the repository's config: a user's project has its own
        env={**os.environ, "MYPYPATH": str(EXAMPLES / "testing-jobs")},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("engine", ENGINES)
def test_an_application_s_tests_of_its_jobs(engine: str, request: pytest.FixtureRequest) -> None:
    out = run_on_engine("testing-jobs", engine, request)
    assert "4 passed" in out
