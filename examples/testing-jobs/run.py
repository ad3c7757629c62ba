"""Testing an application's jobs: `.venv/bin/python examples/testing-jobs/run.py`
(add `--database-url postgresql+asyncpg://...` to run the tests on PostgreSQL).

Runs this folder's test suite (test_billing_jobs.py, with the fixtures of
conftest.py) as the application's developers would: `python -m pytest` here. Each
test adds jobs, runs what is due with hipq.testing.run_until_idle on a fake clock,
and asserts on the outcomes. docs/howto-test-jobs.md walks through it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="default: a SQLite file per test")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.database_url:
        env["TEST_DATABASE_URL"] = args.database_url
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    sys.exit(subprocess.run(command, cwd=HERE, env=env, check=False).returncode)
