"""A hot queue's sends spread over processes: 1, 2 and 3 `hipq serve` processes on one
PostgreSQL drain

  (a) 9 queues of no-op python jobs (``hipq.handlers:noop``), and
  (b) one queue of HTTP jobs against a stand-in receiver on 127.0.0.1 that answers
      200 at once (``callback: false``: the answer is the outcome).

    python benchmarks/bench_hand_off.py [--noop-jobs 18000] [--http-jobs 6000]

The backlog is inserted with the queues paused, once every process has seen the
others; the clock runs from the resume to the last job's ``finished_at``. Printed
per run: jobs/s; each process's share of the sends (the job's ``executor``, or its
queue's owner when it sent the job itself); CPU seconds per job of each process
(/proc); database transactions per job (``pg_stat_database``) and write syscalls per
job, counted by a TCP relay between the hipq processes and PostgreSQL (a round trip:
the client speaks after the server answered; NOTIFYs are not counted). The relay
runs in this script's process, so the figures are comparable with each other, not
with runs without it. For (b) the owner's CPU per job of its tick alone
is measured a second way, (c): the same queue with 3 processes whose owner hands
every job to the other two (``owner_sends_none.py``, a probe for this benchmark), so
that its CPU per job is its tick's alone.

Prints figures, asserts nothing; every wait is bounded, all traffic on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hipq.commands.bench import (
    BenchOptions,
    ServeProcess,
    _free_port,
    cpu_seconds,
    fresh_database,
    utcnow,
)
from tests.peers import serve_app

LEASE_TTL = "3s"  # a beat every second: processes see each other quickly
NOOP_QUEUES = [f"q{i}" for i in range(9)]
TITLES = {
    "noop": "(a) 9 queues of no-op jobs:",
    "http": "(b) one queue of HTTP jobs:",
    "probe": "(c) one queue of HTTP jobs, its owner handing every job to the 2 others:",
}


@dataclass
class Run:
    scenario: str
    processes: int
    jobs: int
    seconds: float
    sent: dict[int, int]  # pid -> jobs it sent
    cpu: dict[int, float]  # pid -> CPU seconds during the drain
    round_trips: int
    transactions: int
    owners: dict[str, int] = field(default_factory=dict)  # queue -> owner pid


class ProbeServe(ServeProcess):
    """``hipq serve`` through ``owner_sends_none.py``."""

    def spawn(self) -> None:
        import subprocess

        from hipq.commands.bench import _clean_env

        command = [sys.executable, str(Path(__file__).with_name("owner_sends_none.py"))]
        command += ["serve", "--config", str(self.config_path)]
        env = _clean_env()
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.config_path.parent,
            )


class Relay:
    """A TCP relay to PostgreSQL that counts round trips: each time a client sends
    after the server last sent to it (or first) is one."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.round_trips = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        answered = [True]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            try:
                while data := await src.read(65536):
                    if up and answered[0]:
                        self.round_trips += 1
                    answered[0] = not up
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))


# The queues' ``hand_off_above`` (``--hand-off-above``): 0, as measured in the README,
# hands every claimed job to the least loaded process; the default config keeps 32.
HAND_OFF_ABOVE = [0]


def config(url: str, port: int, scenario: str, receiver: str) -> dict[str, Any]:
    base: dict[str, Any] = {
        "database_url": url,
        "migrate_on_start": True,
        "log_level": "warning",
        "lease_ttl": LEASE_TTL,
        "server": {"host": "127.0.0.1", "port": port},
    }
    if scenario == "noop":
        queue = {"batch_size": 1000, "batch_interval": "100ms", "hand_off_above": HAND_OFF_ABOVE[0]}
        base["queues"] = {q: queue for q in NOOP_QUEUES}
        noop = {"queue": "q0", "transport": {"python": {"handler": "hipq.handlers:noop"}}}
        base["job_types"] = {"noop": noop}
    else:
        base["queues"] = {
            "hot": {
                "batch_size": 1000,
                "batch_interval": "100ms",
                "concurrency": 200,
                "hand_off_above": HAND_OFF_ABOVE[0],
            }
        }
        base["job_types"] = {
            "send": {
                "queue": "hot",
                "timeout": "60s",
                "transport": {
                    "http": {"url": f"{receiver}/ok", "callback": False, "timeout": "30s"}
                },
            }
        }
    return base


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[str]:
    async def ok(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"ok": True})

    app = Starlette(routes=[Route("/ok", ok, methods=["POST"])])
    async with serve_app(app, backlog=2048) as url:
        yield url


async def wait_until(check: Any, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{what}: not within {within:g}s")


def pid_of(owner: str | None) -> int:
    return int(owner.rsplit(":", 2)[1]) if owner else 0


async def one_run(
    scenario: str, n: int, jobs: int, opts: BenchOptions, workdir: Path, receiver_url: str
) -> Run:
    from sqlalchemy.engine import make_url

    from hipq.jobs import NewJob
    from hipq.store import Store

    queues = NOOP_QUEUES if scenario == "noop" else ["hot"]
    kind = ProbeServe if scenario == "probe" else ServeProcess
    async with fresh_database("postgres", opts, workdir, f"{scenario}-{n}") as url:
        direct = make_url(url)
        relay = Relay(direct.host or "127.0.0.1", direct.port or 5432)
        relayed = direct.set(host="127.0.0.1", port=await relay.start())
        relayed_url = relayed.render_as_string(hide_password=False)
        serves = [
            kind(
                workdir,
                config(relayed_url, _free_port(), scenario, receiver_url),
                f"{scenario}{n}{i}",
            )
            for i in range(n)
        ]
        try:
            for serve in serves:
                serve.spawn()
            for serve in serves:
                await serve.wait_ready()
            async with httpx.AsyncClient(base_url=serves[0].base_url, timeout=30) as api:
                for q in queues:
                    (await api.post(f"/v1/queues/{q}/pause")).raise_for_status()

                async def registered() -> bool:
                    listed = (await api.get("/v1/processes")).json()["processes"]
                    owners = {q["owner"] for q in (await api.get("/v1/queues")).json()["queues"]}
                    return (
                        len(listed) == n
                        and None not in owners
                        and len(owners) == min(n, len(queues))
                    )

                await wait_until(registered, 60, f"{n} processes registered, queues spread")
                await asyncio.sleep(1.5)  # one more beat: every process knows the others
                store = Store.from_url(url)
                try:
                    now = utcnow()
                    backlog = [
                        NewJob(
                            type="noop" if scenario == "noop" else "send",
                            queue=queues[i % len(queues)],
                            payload={"i": i},
                            run_at=now,
                            retry={"strategy": "exponential"},
                        )
                        for i in range(jobs)
                    ]
                    for first in range(0, jobs, 5000):
                        await store.job_insert_many(backlog[first : first + 5000], now)
                finally:
                    await store.close()
                owners = {
                    q["name"]: pid_of(q["owner"])
                    for q in (await api.get("/v1/queues")).json()["queues"]
                }
                engine = create_async_engine(url)
                try:
                    xact = text(
                        "SELECT xact_commit + xact_rollback FROM pg_stat_database"
                        " WHERE datname = current_database()"
                    )
                    async with engine.connect() as conn:
                        xact_before = (await conn.execute(xact)).scalar_one()
                    cpu_before = {s.pid: cpu_seconds(s.pid) for s in serves}
                    trips_before = relay.round_trips
                    started = time.time()
                    for q in queues:
                        (await api.post(f"/v1/queues/{q}/resume")).raise_for_status()

                    async def drained() -> bool:
                        found = (await api.get("/v1/queues")).json()["queues"]
                        return all(
                            q["scheduled"] + q["running"] + q["awaiting"] == 0 for q in found
                        )

                    await wait_until(drained, 600, "every job done")
                    cpu = {s.pid: cpu_seconds(s.pid) - cpu_before[s.pid] for s in serves}
                    round_trips = relay.round_trips - trips_before
                    await asyncio.sleep(1.5)  # backends report their statistics
                    async with engine.connect() as conn:
                        transactions = (await conn.execute(xact)).scalar_one() - xact_before
                        last = (
                            await conn.execute(text("SELECT max(finished_at) FROM hipq_jobs"))
                        ).scalar_one()
                        rows = (
                            await conn.execute(
                                text(
                                    "SELECT coalesce(j.executor, q.lease_owner), count(*)"
                                    " FROM hipq_jobs j JOIN hipq_queues q ON q.name = j.queue"
                                    " GROUP BY 1"
                                )
                            )
                        ).all()
                finally:
                    await engine.dispose()
        finally:
            for serve in serves:
                serve.stop()
            await relay.stop()
    sent = {s.pid: 0 for s in serves}
    for who, count in rows:
        sent[pid_of(who)] = sent.get(pid_of(who), 0) + count
    seconds = last.timestamp() - started
    return Run(scenario, n, jobs, seconds, sent, cpu, round_trips, transactions, owners)


def report(run: Run) -> None:
    total_cpu = sum(run.cpu.values())
    print(
        f"  {run.processes} process(es): {run.jobs / run.seconds:8.0f} jobs/s"
        f" ({run.jobs} in {run.seconds:.2f}s); hipq CPU {1e6 * total_cpu / run.jobs:.0f} µs/job;"
        f" {run.transactions / run.jobs:.2f} transactions/job;"
        f" {run.round_trips / run.jobs:.2f} round trips/job"
    )
    owned: dict[int, list[str]] = {}
    for q, pid in run.owners.items():
        owned.setdefault(pid, []).append(q)
    for pid in run.cpu:
        sent = run.sent.get(pid, 0)
        per_sent = f"{1e6 * run.cpu[pid] / sent:.0f} µs per job sent" if sent else "sent none"
        print(
            f"    pid {pid}: owns {len(owned.get(pid, []))} queue(s), sent {sent}"
            f" ({100 * sent / run.jobs:.0f} %), CPU {run.cpu[pid]:.2f}s ({per_sent})"
        )
    if run.scenario == "probe":
        owner = run.owners["hot"]
        executors = [p for p in run.cpu if p != owner and run.sent.get(p)]
        per_send = sum(run.cpu[p] for p in executors) / sum(run.sent[p] for p in executors)
        tick = run.cpu[owner] / run.jobs
        print(
            f"    executor CPU per job sent {1e6 * per_send:.0f} µs; owner CPU per job (its"
            f" tick alone) {1e6 * tick:.0f} µs → one queue's ceiling ≈ {1 / tick:.0f} jobs/s"
            f" with K executors on K more cores, reached at K ≈ {per_send / tick:.1f}"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres-url", default=BenchOptions.postgres_url)
    parser.add_argument("--noop-jobs", type=int, default=18_000)
    parser.add_argument("--http-jobs", type=int, default=6_000)
    parser.add_argument("--processes", default="1,2,3")
    parser.add_argument("--hand-off-above", type=int, default=0)
    args = parser.parse_args()
    HAND_OFF_ABOVE[0] = args.hand_off_above
    opts = BenchOptions(postgres_url=args.postgres_url)
    counts = [int(n) for n in args.processes.split(",")]
    print(
        f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())};"
        f" {os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory(prefix="hipq-hand-off-") as tmp:
        async with receiver() as receiver_url:
            for scenario, jobs in (
                ("noop", args.noop_jobs),
                ("http", args.http_jobs),
                ("probe", args.http_jobs),
            ):
                print(TITLES[scenario])
                for n in counts if scenario != "probe" else [3]:
                    report(await one_run(scenario, n, jobs, opts, Path(tmp), receiver_url))
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    asyncio.run(main())
