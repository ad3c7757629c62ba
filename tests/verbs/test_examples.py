"""The examples run as a user runs them (one command each) and print what they promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXPECTED = {
    "retries-after-failure": [
        "attempt 1: retried   RuntimeError: the service is not ready (attempt 1)",
        "attempt 2: retried   RuntimeError: the service is not ready (attempt 2)",
        "attempt 3: completed",
        "job 1 completed: {'done_on_attempt': 3}",
    ],
    "priority": [
        "priority   1: payment",
        "priority   1: refund",
        "priority  20: email",
        "priority  50: report",
        "priority  90: cleanup",
        "priority 100: backup",
    ],
    "graceful-shutdown": [
        "job 1 is running; sending SIGTERM",
        "hipq serve exited with 0",
        "job 1 completed: {'slept': 2} (attempts: ['completed'])",
    ],
    "heartbeat-stops": [
        "attempt 1: retried   timed out after 1s",
        "attempt 2: completed",
        "job 1 completed: {'pages': 4, 'attempt': 2}",
    ],
}


def test_the_examples_print_what_they_promise() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    runs = {
        name: subprocess.Popen(
            [sys.executable, str(REPO / "examples" / name / "main.py")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in EXPECTED
    }
    for name, process in runs.items():
        out, err = process.communicate(timeout=180)
        assert process.returncode == 0, (name, err)
        lines = [line.rstrip() for line in out.splitlines()]
        for expected in EXPECTED[name]:
            assert any(line.startswith(expected) for line in lines), (name, expected, out)
        assert (REPO / "examples" / name / "README.md").read_text().strip()
