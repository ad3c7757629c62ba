"""What ``SELECT hipq_add_job(...)`` costs the PostgreSQL backend (prints figures,
asserts nothing).

    python benchmarks/bench_sql_enqueue.py --calls 3000 [--no-sync-commit]

On a fresh database with one job type (``echo``, as the anchors race's
``sql_single_jobs_per_s`` uses it), from one asyncpg connection, sequential: ``SELECT
1`` (the floor of a call), ``hipq_add_job('echo', payload)`` as the race calls it, the
same with a new ``job_key`` each time (the key's path), and ``hipq_add_jobs`` of 1,000
jobs per call. For each: calls per second and the backend's CPU per job, read from
``/proc`` of the backend process (a server on this machine; ``n/a`` otherwise).
``--no-sync-commit`` leaves the commit's WAL flush out (``synchronous_commit =
off`` for this connection only), so that the CPU of the call itself stands out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hipq.commands.bench import BenchOptions, fresh_database, utcnow
from hipq.config import load_settings
from hipq.job_types import JobTypes
from hipq.plugins import RetryStrategies
from hipq.process.job_types_publisher import mirror_of
from hipq.store import Store

PAYLOAD = json.dumps({"hello": "world", "n": 1})
BATCH = 1000
ADD_JOBS = "SELECT hipq_add_jobs($1::jsonb)"


def backend_cpu(pid: int) -> float | None:
    """Seconds of CPU the backend ``pid`` used so far (None: not on this machine)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed(conn: asyncpg.Connection, calls: int, sql: str, *args: Any) -> tuple[float, float]:
    """(calls per second, backend CPU seconds per call; NaN when not readable)."""
    pid = conn.get_server_pid()
    for i in range(-min(200, calls), calls):  # first warm: the statement and plans cached
        if i == 0:
            cpu, started = backend_cpu(pid), time.perf_counter()
        await conn.fetchval(sql, *[a(i) if callable(a) else a for a in args])
    wall, cpu_after = time.perf_counter() - started, backend_cpu(pid)
    used = float("nan") if cpu is None or cpu_after is None else (cpu_after - cpu) / calls
    return calls / wall, used


async def measure(opts: BenchOptions, calls: int, sync_commit: bool, workdir: Path) -> None:
    async with fresh_database("postgres", opts, workdir, "sql_enqueue") as url:
        settings = load_settings(
            None,
            database_url=url,
            queues={"default": {}},
            job_types={"echo": {"transport": {"python": {"handler": "hipq.handlers:echo"}}}},
        )
        types = JobTypes.compile(settings, RetryStrategies())
        store = Store.from_url(url)
        try:
            await store.job_types_mirror_write(*mirror_of(settings, types), "bench", utcnow())
        finally:
            await store.close()
        conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
        try:
            if not sync_commit:
                await conn.execute("SET synchronous_commit = off")
            jobs = json.dumps([{"type": "echo", "payload": {"n": i}} for i in range(BATCH)])
            rows = [
                ("SELECT 1", await timed(conn, calls, "SELECT 1"), 1),
                (
                    "hipq_add_job('echo', payload)",
                    await timed(conn, calls, "SELECT hipq_add_job('echo', $1::jsonb)", PAYLOAD),
                    1,
                ),
                (
                    "the same with a new job_key",
                    await keyed(conn, calls),
                    1,
                ),
                (
                    f"hipq_add_jobs, {BATCH:,} per call",
                    await timed(
                        conn, max(1, calls // 300), "SELECT hipq_add_jobs($1::jsonb)", jobs
                    ),
                    BATCH,
                ),
            ]
        finally:
            await conn.close()
    commit = "on" if sync_commit else "off"
    print(f"PostgreSQL, synchronous_commit {commit}, one connection, sequential")
    for name, (rate, cpu), per_call in rows:
        cpu_us = "n/a" if cpu != cpu else f"{cpu / per_call * 1e6:6.1f} us"
        print(f"  {name:34} {rate * per_call:10,.0f} jobs/s   backend CPU per job {cpu_us}")


async def keyed(conn: asyncpg.Connection, calls: int) -> tuple[float, float]:
    sql = "SELECT hipq_add_job('echo', $1::jsonb, job_key => $2)"
    try:
        return await timed(conn, calls, sql, PAYLOAD, lambda i: f"k{i}")
    except asyncpg.UndefinedFunctionError:  # a hipq whose hipq_add_job takes no job_key
        return float("nan"), float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres-url", default=BenchOptions().postgres_url)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--no-sync-commit", action="store_true")
    args = parser.parse_args()
    opts = BenchOptions(postgres_url=args.postgres_url)
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(measure(opts, args.calls, not args.no_sync_commit, Path(tmp)))


if __name__ == "__main__":
    main()
