"""python handlers for the end-to-end tests (they run inside `hipq serve` subprocesses).

The test process cannot see the server's memory, so a handler leaves its trace in
a file: one line per run, appended with O_APPEND so that lines written by several
processes (and a process killed mid-way) never interleave within a line.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from hipq.transports.python import JobContext

# Outside the HIPQ_ prefix, which belongs to the server's settings.
RUNS_FILE_ENV = "E2E_RUNS_FILE"
WORK_MS_ENV = "E2E_WORK_MS"


def append_run(path: str, job_id: int, attempt: int) -> None:
    line = f"{job_id} {attempt} {os.getpid()}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


async def record(job: JobContext) -> dict[str, Any]:
    """Note the run (job id, attempt, pid) when it starts, then work a few ms.

    Recording at the start counts a run that a kill cut short: that is exactly
    the run that at-least-once delivery has to repeat.
    """
    append_run(os.environ[RUNS_FILE_ENV], job.id, job.attempt)
    await asyncio.sleep(int(os.environ.get(WORK_MS_ENV, "20")) / 1000)
    return {"pid": os.getpid()}


def read_runs(path: str | os.PathLike[str]) -> list[tuple[int, int, int]]:
    """The runs a test's servers recorded: (job id, attempt, pid), in write order."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    runs = []
    for line in text.splitlines():
        job_id, attempt, pid = line.split()
        runs.append((int(job_id), int(attempt), int(pid)))
    return runs


async def record_span(job: JobContext) -> None:
    """Note the run's start and its end (``<job id> start`` / ``<job id> end``), with
    a few ms of work between: what ran at once is read from the lines' order."""
    path = os.environ[RUNS_FILE_ENV] + ".spans"
    for mark in ("start", "end"):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{job.id} {mark}\n".encode())
        finally:
            os.close(fd)
        if mark == "start":
            await asyncio.sleep(int(os.environ.get(WORK_MS_ENV, "20")) / 1000)
