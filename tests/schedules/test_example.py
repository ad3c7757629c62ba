"""The recurring-job example runs with its one command and does what its README says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_recurring_job_example_runs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "recurring-job" / "run.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "48 report jobs, 48 completed"
    # Spring forward in Berlin: 02:00 and 02:30 do not exist that night, so those
    # fire times are the same instants as 03:00 and 03:30 and make no second job.
    assert any("2026-03-29T03:00:00+02:00" in line for line in lines)
    assert not any("T02:00:00+02:00" in line or "T02:30:00+02:00" in line for line in lines)
