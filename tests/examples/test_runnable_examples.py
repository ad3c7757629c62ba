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


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_transactional_enqueue(engine: str, request: pytest.FixtureRequest) -> None:
    if engine == "sqlite":
        out = run_example("transactional-enqueue")
    else:
        admin = request.getfixturevalue("postgres_admin_url")
        name = unique_database_name("hipq_example")
        url = create_database_sync(admin, name)
        try:
            out = run_example("transactional-enqueue", "--database-url", url)
        finally:
            drop_database_sync(admin, name)
    assert "order 2 rolled back (payment declined): no order, no job" in out
    assert "order 3 refused, rolled back: type: unknown job type 'send_reciept'" in out
    assert "orders stored: [1]; jobs stored: [1]" in out
