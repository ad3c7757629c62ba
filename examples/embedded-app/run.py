"""hipq inside an application: `.venv/bin/python examples/embedded-app/run.py`
(add `--database-url postgresql+asyncpg://...` for PostgreSQL).

The application starts hipq's Service in its own process (no `hipq serve`, no REST
API), adds jobs with the same checks and defaults as POST /v1/jobs, waits for one,
shows a refused job naming its field, and stops: jobs still running get
shutdown_grace to finish. docs/howto-embed.md explains each step.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # signup_jobs.py, the application's handlers

try:
    from hipq.service import IntakeError, Service
except ModuleNotFoundError:  # run with a Python that lacks hipq: say which one has it
    sys.exit("hipq is not installed for this Python: run .venv/bin/python " + " ".join(sys.argv))
from hipq.lifecycle import State  # noqa: E402


async def signup(hipq: Service, email: str) -> int:
    """What the application does when a user signs up: its own work, then a job."""
    job = await hipq.add_job("send_welcome", {"email": email}, labels={"source": "signup"})
    return job.id


async def main(database_url: str) -> int:
    async with Service.from_config(HERE / "config.yaml", database_url=database_url) as hipq:
        job_id = await signup(hipq, "ada@example.com")
        added = await hipq.get_job(job_id)
        print(
            f"added job {job_id}: queue {added.queue}, priority {added.priority}, "
            f"timeout {added.timeout_seconds:g}s (the job type's defaults)"
        )
        done = await hipq.wait_for_job(job_id, timeout=60)
        print(f"job {job_id} {done.state}: {done.result}")

        try:
            await hipq.add_job("send_welcome", {"email": "bob@example.com"}, run_in="soon")
        except IntakeError as exc:
            print(f"refused: {exc}")  # exc.field names the field: run_in

        emails = [f"user{i}@example.com" for i in range(3)]
        batch = await hipq.add_jobs(
            [{"type": "send_welcome", "payload": {"email": email}} for email in emails]
        )
        finished = [await hipq.wait_for_job(job.id, timeout=60) for job in batch]
        completed = sum(1 for job in finished if job.state is State.COMPLETED)
        print(f"a batch of {len(batch)} jobs, {completed} completed")
    print("stopped")
    return 0 if done.state is State.COMPLETED and completed == len(batch) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="default: a SQLite file in a temporary directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite+aiosqlite:///{tmp}/hipq.db"
        sys.exit(asyncio.run(main(url)))
