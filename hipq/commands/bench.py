"""Benchmarks of hipq's core, behind ``hipq bench`` (and ``benchmarks/bench_core.py``).

They print figures and assert nothing. Four measurements, each on SQLite and/or PostgreSQL,
each on a fresh database that is removed afterwards:

- ``enqueue``: REST enqueue rate against ``hipq serve`` run as a subprocess (real uvicorn,
  real HTTP on 127.0.0.1): batches through ``POST /v1/jobs/batch``, and one job per call.
- ``process``: how fast an in-process ``Service`` drains a backlog of no-op python jobs.
- ``latency``: from one ``POST /v1/jobs`` to the start of its handler, on an idle queue
  whose tick is 1 s, so only the wake-up can explain a low figure; also from the end of
  the POST (its 201 comes after the commit), as job queues measure from their commit.
- ``memory``: the RSS high-water mark of ``hipq serve`` over a large backlog, against the
  same process over an empty database.

Every wait is bounded by a deadline and all traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

from hipq.process import runtime
from hipq.transports.python import JobContext

DEFAULT_POSTGRES_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
MEASUREMENTS = ("enqueue", "process", "latency", "memory")
ENGINES = ("sqlite", "postgres")
QUEUE = "default"
NOOP_TYPE = "noop"
RECORD_TYPE = "bench_record"

# What the core aims at on a 2-core machine with PostgreSQL; printed next to the figures.
TARGETS = {
    "enqueue.batch": ">= 30,000 jobs/s",
    "process": ">= 10,000 jobs/s",
    "latency.median": "<= 5 ms",
    "memory": "independent of the backlog",
}


@dataclass
class BenchOptions:
    measurements: tuple[str, ...] = MEASUREMENTS
    engines: tuple[str, ...] = ENGINES
    postgres_url: str = DEFAULT_POSTGRES_URL
    batches: int = 50
    batch_size: int = 1000
    batch_clients: int = 4
    single_jobs: int = 5000
    single_clients: int = 16
    backlog: int = 50_000
    process_batch_size: int = 1000
    latency_jobs: int = 200
    memory_jobs: int = 1_000_000
    memory_seconds: float = 10.0
    memory_concurrency: int = 10
    workdir: str | None = None
    json_path: str | None = None


@dataclass
class Figure:
    engine: str
    measurement: str
    name: str
    value: float
    unit: str
    target: str = ""
    note: str = ""

    def line(self) -> str:
        target = f"   (target {self.target})" if self.target else ""
        note = f"   [{self.note}]" if self.note else ""
        value = f"{_fmt(self.value):>12} {self.unit}"
        return f"  {self.engine:<8} {self.name:<44} {value}{target}{note}"


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def utcnow() -> datetime:
    return datetime.now(UTC)


# -- the handler the latency measurement runs ------------------------------------------------


async def record_start(job: JobContext) -> None:
    """Appends ``<n> <time.time()>`` to ``payload.file`` as soon as the job starts."""
    started = time.time()
    # A blocking append of one short line: cheaper than any thread hop it would take.
    with open(job.payload["file"], "a") as out:  # noqa: ASYNC230
        out.write(f"{job.payload['n']} {started!r}\n")


# -- databases --------------------------------------------------------------------------------


def _pg_connect_kwargs(url: str) -> dict[str, Any]:
    from hipq.store.process_guard import asyncpg_connect_kwargs

    return asyncpg_connect_kwargs(url)


async def _pg_admin(url: str, *statements: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(**_pg_connect_kwargs(url), timeout=10)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _pg_reachable(url: str) -> str | None:
    """None when the server answers, else why not."""
    try:
        await _pg_admin(url, "SELECT 1")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


class PgFallback:
    """A private PostgreSQL from the ``pgserver`` wheel when no server answers (as in the tests)."""

    def __init__(self) -> None:
        self._server: Any = None
        self._dir: Path | None = None

    def start(self) -> str:
        import warnings

        from sqlalchemy.engine import URL

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver  # only in the test extra

        self._dir = Path(tempfile.mkdtemp(prefix="hipq-bench-pg-"))
        self._dir.chmod(0o755)  # pgserver runs the server as another user when root
        self._server = pgserver.get_server(self._dir / "data", cleanup_mode="delete")
        info = self._server.get_postmaster_info()
        url = URL.create(
            "postgresql+asyncpg",
            username="postgres",
            database="postgres",
            query={"host": str(info.socket_dir)},
        )
        if info.port and info.port != 5432:
            url = url.set(port=info.port)
        return url.render_as_string(hide_password=False)

    def stop(self) -> None:
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.cleanup()
            self._server = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


@contextlib.asynccontextmanager
async def fresh_database(
    engine: str, opts: BenchOptions, workdir: Path, tag: str
) -> AsyncIterator[str]:
    """A migrated, empty database; removed afterwards. Yields its SQLAlchemy URL."""
    from sqlalchemy.engine import make_url

    from hipq.store import Store

    if engine == "sqlite":
        path = workdir / f"{tag}.db"
        url = f"sqlite+aiosqlite:///{path}"
    else:
        name = f"hipq_bench_{os.getpid()}"
        await _pg_admin(
            opts.postgres_url,
            f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
            f'CREATE DATABASE "{name}"',
        )
        url = make_url(opts.postgres_url).set(database=name).render_as_string(hide_password=False)
    try:
        store = Store.from_url(url)
        try:
            await store.schema_upgrade()
        finally:
            await store.close()
        yield url
    finally:
        if engine == "sqlite":
            _remove_sqlite(path)
        else:
            await _pg_admin(opts.postgres_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _remove_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


async def insert_backlog(
    url: str, count: int, run_at: datetime, job_type: str = NOOP_TYPE, chunk: int = 10_000
) -> float:
    """Insert ``count`` jobs through the Store, ``chunk`` per transaction; the seconds taken."""
    from hipq.jobs import NewJob
    from hipq.store import Store

    store = Store.from_url(url)
    started = time.perf_counter()
    try:
        now = utcnow()
        for first in range(0, count, chunk):
            batch = [
                NewJob(
                    type=job_type,
                    queue=QUEUE,
                    payload={"i": i},
                    run_at=run_at,
                    retry={"strategy": "exponential"},
                )
                for i in range(first, min(count, first + chunk))
            ]
            await store.job_insert_many(batch, now)
    finally:
        await store.close()
    return time.perf_counter() - started


async def _with_store(url: str, action: Callable[[Any], Awaitable[Any]]) -> Any:
    from hipq.store import Store

    store = Store.from_url(url)
    try:
        return await action(store)
    finally:
        await store.close()


# -- settings and the serve subprocess ------------------------------------------------------


def settings_data(
    url: str,
    port: int,
    *,
    concurrency: int | None = None,
    batch_size: int = 1000,
    batch_interval: str = "1s",
) -> dict[str, Any]:
    queue: dict[str, Any] = {"batch_size": batch_size, "batch_interval": batch_interval}
    if concurrency is not None:
        queue["concurrency"] = concurrency
    return {
        "database_url": url,
        "migrate_on_start": True,
        "log_level": "warning",
        "server": {"host": "127.0.0.1", "port": port},
        "queues": {QUEUE: queue},
        "job_types": {
            NOOP_TYPE: {"transport": {"python": {"handler": "hipq.handlers:noop"}}},
            RECORD_TYPE: {"transport": {"python": {"handler": "hipq.commands.bench:record_start"}}},
        },
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env() -> dict[str, str]:
    # HIPQ_* variables override the config file: a user's HIPQ_DATABASE_URL must never
    # point a benchmark at a real database.
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("HIPQ_")}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_status(pid: int) -> dict[str, int]:
    """VmHWM and VmRSS of a process, in kB (Linux /proc)."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(rest.split()[0])
    return out


class ServeProcess:
    """``hipq serve`` as a subprocess on a free 127.0.0.1 port."""

    def __init__(self, workdir: Path, data: dict[str, Any], tag: str) -> None:
        self.port = int(data["server"]["port"])
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.config_path = workdir / f"{tag}.yaml"
        self.config_path.write_text(yaml.safe_dump(data))
        self.log_path = workdir / f"{tag}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def spawn(self) -> None:
        command = [
            sys.executable,
            "-c",
            "from hipq.commands.main import main; main()",
            "serve",
            "--config",
            str(self.config_path),
        ]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_clean_env(),
                cwd=self.config_path.parent,
            )

    async def wait_ready(self, within: float = 60.0) -> None:
        assert self.process is not None
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"hipq serve exited with {self.process.returncode}:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        self.stop()
        raise RuntimeError(f"hipq serve was not ready within {within:g}s:\n{self.log_tail()}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


@contextlib.asynccontextmanager
async def serving(workdir: Path, data: dict[str, Any], tag: str) -> AsyncIterator[ServeProcess]:
    serve = ServeProcess(workdir, data, tag)
    try:
        serve.spawn()
        await serve.wait_ready()
        yield serve
    finally:
        serve.stop()


# -- 1. REST enqueue rate ----------------------------------------------------------------------


async def _post_all(
    base_url: str,
    path: str,
    bodies: list[bytes],
    clients: int,
    per_request: float,
    overall: float = 600.0,
) -> float:
    """POST every body, ``clients`` connections at a time; seconds taken. Any non-2xx fails."""
    pending = iter(bodies)
    headers = {"content-type": "application/json"}

    async def client_task() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=per_request) as client:
            for body in pending:
                response = await client.post(path, content=body, headers=headers)
                if response.status_code != 201:
                    raise RuntimeError(
                        f"POST {path}: HTTP {response.status_code} {response.text[:300]}"
                    )

    started = time.perf_counter()
    async with asyncio.timeout(overall):
        await asyncio.gather(*(client_task() for _ in range(clients)))
    return time.perf_counter() - started


async def measure_enqueue(engine: str, opts: BenchOptions, workdir: Path) -> list[Figure]:
    figures = []
    async with fresh_database(engine, opts, workdir, "enqueue") as url:
        data = settings_data(url, _free_port())
        async with serving(workdir, data, "enqueue") as serve:
            async with httpx.AsyncClient(base_url=serve.base_url, timeout=10) as client:
                # Paused: the figure is the API's cost alone, not the loop draining meanwhile.
                (await client.post(f"/v1/queues/{QUEUE}/pause")).raise_for_status()
                warm = orjson.dumps({"jobs": [{"type": NOOP_TYPE}] * 10})
                await client.post(
                    "/v1/jobs/batch", content=warm, headers={"content-type": "application/json"}
                )
            size = opts.batch_size
            bodies = [
                orjson.dumps(
                    {
                        "jobs": [
                            {"type": NOOP_TYPE, "payload": {"i": b * size + k}} for k in range(size)
                        ]
                    }
                )
                for b in range(opts.batches)
            ]
            cpu = cpu_seconds(serve.pid)
            took = await _post_all(
                serve.base_url, "/v1/jobs/batch", bodies, opts.batch_clients, per_request=120
            )
            cpu = cpu_seconds(serve.pid) - cpu
            total = opts.batches * size
            figures.append(
                Figure(
                    engine,
                    "enqueue",
                    f"batch POST ({size}/call, {opts.batch_clients} clients)",
                    total / took,
                    "jobs/s",
                    TARGETS["enqueue.batch"],
                    f"{total:,} jobs in {took:.2f}s, queue paused; {_per_cpu(total, cpu)}",
                )
            )
            print(figures[-1].line(), flush=True)
            singles = [
                orjson.dumps({"type": NOOP_TYPE, "payload": {"i": i}})
                for i in range(opts.single_jobs)
            ]
            cpu = cpu_seconds(serve.pid)
            took = await _post_all(
                serve.base_url, "/v1/jobs", singles, opts.single_clients, per_request=30
            )
            cpu = cpu_seconds(serve.pid) - cpu
            figures.append(
                Figure(
                    engine,
                    "enqueue",
                    f"single POST ({opts.single_clients} clients)",
                    opts.single_jobs / took,
                    "jobs/s",
                    "",
                    f"{opts.single_jobs:,} jobs in {took:.2f}s, queue paused; "
                    f"{_per_cpu(opts.single_jobs, cpu)}",
                )
            )
            print(figures[-1].line(), flush=True)
    return figures


def _per_cpu(jobs: int, cpu: float) -> str:
    # Jobs per CPU-second of the hipq process: steadier than wall time on a shared machine.
    return f"{jobs / cpu:,.0f} jobs per CPU-second of hipq" if cpu > 0 else "no CPU time measured"


# -- 2. processing rate of a backlog -------------------------------------------------------------


async def measure_process(engine: str, opts: BenchOptions, workdir: Path) -> list[Figure]:
    from hipq.config import Settings
    from hipq.service import Service

    async with fresh_database(engine, opts, workdir, "process") as url:
        took_insert = await insert_backlog(url, opts.backlog, utcnow())
        settings = Settings(**settings_data(url, _free_port(), batch_size=opts.process_batch_size))
        service = Service(settings)
        done = 0
        finished_at = 0.0
        all_done = asyncio.Event()

        def on_event(name: str, fields: dict[str, Any]) -> None:
            # The loop emits job_settled after each commit: exact, and no polling cost.
            nonlocal done, finished_at
            if name == "job_settled" and fields["state"] == "completed":
                done += 1
                if done >= opts.backlog:
                    finished_at = time.perf_counter()
                    all_done.set()

        service.events.subscribe(on_event)
        await service.start()
        # The collector as ``hipq serve`` sets it once started (``hipq.process.runtime``); put
        # back after this measurement, so that the benchmark's own clients in the
        # other measurements run as they always did.
        collector = gc.get_threshold()
        runtime.settle_after_start()
        started = time.perf_counter()  # the loop task is created but has not run yet
        cpu = time.process_time()
        try:
            async with asyncio.timeout(max(120.0, opts.backlog / 200)):
                while not all_done.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(all_done.wait(), timeout=0.1)
            cpu = time.process_time() - cpu
            counts = await service.store.queue_counts(QUEUE, utcnow())
        finally:
            await service.stop()
            gc.unfreeze()
            gc.set_threshold(*collector)
    left = counts.scheduled + counts.running + counts.awaiting + counts.failed
    if left:
        raise RuntimeError(f"process: {left} jobs not completed after the run: {counts}")
    took = finished_at - started
    figure = Figure(
        engine,
        "process",
        f"drain {opts.backlog:,} noop jobs (batch_size {opts.process_batch_size})",
        opts.backlog / took,
        "jobs/s",
        TARGETS["process"],
        f"{took:.2f}s, {_per_cpu(opts.backlog, cpu)}, collector as hipq serve sets it; "
        f"backlog inserted via Store at "
        f"{opts.backlog / took_insert:,.0f} jobs/s",
    )
    print(figure.line(), flush=True)
    return [figure]


# -- 3. idle latency ------------------------------------------------------------------------------


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


async def _wait_lines(path: Path, count: int, within: float) -> list[str]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        lines = _read_lines(path)
        if len(lines) >= count:
            return lines
        await asyncio.sleep(0.001)
    raise RuntimeError(f"latency: the handler did not record job {count} within {within:g}s")


async def measure_latency(engine: str, opts: BenchOptions, workdir: Path) -> list[Figure]:
    record = workdir / "latency-starts.txt"
    _remove_file(record)
    warmup = 10
    lines: list[str] = []
    posted: dict[int, float] = {}
    post_rtt: list[float] = []
    async with fresh_database(engine, opts, workdir, "latency") as url:
        data = settings_data(url, _free_port(), batch_interval="1s")
        async with (
            serving(workdir, data, "latency") as serve,
            httpx.AsyncClient(base_url=serve.base_url, timeout=10) as client,
        ):
            for n in range(warmup + opts.latency_jobs):
                body = orjson.dumps({"type": RECORD_TYPE, "payload": {"n": n, "file": str(record)}})
                before = time.time()
                response = await client.post(
                    "/v1/jobs", content=body, headers={"content-type": "application/json"}
                )
                post_rtt.append(time.time() - before)
                response.raise_for_status()
                posted[n] = before
                lines = await _wait_lines(record, n + 1, within=5)
                # Let the loop go back to sleep: every job lands on an idle queue.
                await asyncio.sleep(0.02)
    _remove_file(record)
    starts = {int(n): float(t) for n, t in (line.split() for line in lines)}
    measured = range(warmup, warmup + opts.latency_jobs)
    samples = sorted((starts[n] - posted[n]) * 1000 for n in measured)
    # As the peers measure it: from the moment the client knows the job is committed
    # (the 201 is sent only after the commit), the end of its call.
    after_answer = sorted((starts[n] - posted[n] - post_rtt[n]) * 1000 for n in measured)
    rtt = statistics.median(r * 1000 for r in post_rtt[warmup:])
    note = f"{len(samples)} jobs, batch_interval 1s; POST round trip median {rtt:.2f} ms"
    figures = [
        Figure(
            engine,
            "latency",
            "POST -> handler start, median",
            statistics.median(samples),
            "ms",
            TARGETS["latency.median"],
            note,
        ),
        Figure(engine, "latency", "POST -> handler start, p99", _percentile(samples, 99), "ms"),
        Figure(engine, "latency", "POST -> handler start, max", samples[-1], "ms"),
        Figure(
            engine,
            "latency",
            "POST answered (commit) -> handler start (median)",
            statistics.median(after_answer),
            "ms",
            "",
            "from the end of the client's call, as the anchors' peers are measured",
        ),
    ]
    for figure in figures:
        print(figure.line(), flush=True)
    return figures


def _remove_file(path: Path) -> None:
    path.unlink(missing_ok=True)


def _percentile(sorted_values: list[float], pct: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(pct / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


# -- 4. peak memory --------------------------------------------------------------------------------


async def _rss_while_serving(
    workdir: Path, data: dict[str, Any], tag: str, seconds: float, admitting: bool = False
) -> dict[str, int]:
    """Serve for ``seconds``, asking for the queue's counts every second as an operator would.

    With ``admitting`` the window starts once the loop runs jobs, so that it measures a
    loop that scans its backlog, not one still starting.
    """
    async with serving(workdir, data, tag) as serve:
        async with httpx.AsyncClient(base_url=serve.base_url, timeout=60) as client:
            started = time.monotonic()
            while admitting:
                body = (await client.get(f"/v1/queues/{QUEUE}")).json()
                if body["running"] or body["awaiting"]:
                    print(
                        f"    {tag}: the loop runs jobs {time.monotonic() - started:.1f}s "
                        "after the server is ready",
                        flush=True,
                    )
                    break
                if time.monotonic() - started > 120:
                    raise RuntimeError(
                        f"memory: {tag}: the loop admitted nothing in 120s "
                        f"({body}):\n{serve.log_tail()}"
                    )
                await asyncio.sleep(0.2)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                (await client.get(f"/v1/queues/{QUEUE}")).raise_for_status()
                await asyncio.sleep(1.0)
            body = (await client.get(f"/v1/queues/{QUEUE}")).json()
        status = vm_status(serve.pid)
    print(
        f"    {tag}: VmHWM {status['VmHWM'] / 1024:.1f} MiB, VmRSS {status['VmRSS'] / 1024:.1f} "
        f"MiB; queue scheduled={body['scheduled']} due={body['due']} running={body['running']} "
        f"owner={body['owner']}",
        flush=True,
    )
    return status


async def measure_memory(engine: str, opts: BenchOptions, workdir: Path) -> list[Figure]:
    from sqlalchemy import update

    from hipq.store.schema import jobs

    n = opts.memory_jobs
    figures: list[Figure] = []

    def add(name: str, status: dict[str, int], note: str) -> None:
        figures.append(
            Figure(
                engine,
                "memory",
                name,
                status["VmHWM"] / 1024,
                "MiB peak RSS",
                TARGETS["memory"],
                note,
            )
        )
        print(figures[-1].line(), flush=True)

    async with fresh_database(engine, opts, workdir, "memory") as url:
        plain = settings_data(url, _free_port())
        add(
            "hipq serve, empty database",
            await _rss_while_serving(workdir, plain, "memory-empty", opts.memory_seconds),
            f"{opts.memory_seconds:g}s",
        )
        took = await insert_backlog(url, n, utcnow() + timedelta(days=1))
        print(
            f"    inserted {n:,} jobs via Store in {took:.1f}s ({n / took:,.0f} jobs/s)", flush=True
        )
        add(
            f"{n:,} scheduled jobs, run_at +1 day",
            await _rss_while_serving(workdir, plain, "memory-future", opts.memory_seconds),
            "not due",
        )

        async def make_due(store: Any) -> None:
            async with store.engine.begin() as conn:
                await conn.execute(update(jobs).values(run_at=utcnow() - timedelta(seconds=1)))
            await store.queue_set_paused(QUEUE, True)

        await _with_store(url, make_due)
        add(
            f"{n:,} due jobs, queue paused",
            await _rss_while_serving(workdir, plain, "memory-paused", opts.memory_seconds),
            "due, loop admits nothing",
        )
        await _with_store(url, lambda store: store.queue_set_paused(QUEUE, False))
        small = settings_data(url, _free_port(), concurrency=opts.memory_concurrency)
        add(
            f"{n:,} due jobs, concurrency {opts.memory_concurrency}",
            await _rss_while_serving(
                workdir, small, "memory-scanning", opts.memory_seconds, admitting=True
            ),
            "loop scans a full batch every tick",
        )
    return figures


# -- running them ------------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[str, BenchOptions, Path], Awaitable[list[Figure]]]] = {
    "enqueue": measure_enqueue,
    "process": measure_process,
    "latency": measure_latency,
    "memory": measure_memory,
}


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.partition(":")[2].strip()
                break
    return f"{os.cpu_count()} cores ({cpu}), Python {sys.version.split()[0]}"


async def run(opts: BenchOptions) -> list[Figure]:
    unknown = set(opts.measurements) - set(MEASUREMENTS)
    if unknown:
        known = ", ".join(MEASUREMENTS)
        raise ValueError(f"unknown measurement {sorted(unknown)[0]!r} (known: {known})")
    own_dir = opts.workdir is None
    workdir = _workdir(opts.workdir)
    fallback: PgFallback | None = None
    figures: list[Figure] = []
    print(f"hipq bench on {machine()}", flush=True)
    try:
        if "postgres" in opts.engines:
            why = await _pg_reachable(opts.postgres_url)
            if why is not None:
                try:
                    fallback = PgFallback()
                    opts.postgres_url = fallback.start()
                except ImportError:
                    raise RuntimeError(
                        f"PostgreSQL at {opts.postgres_url} is not usable ({why}); "
                        "pass --postgres-url or --engine sqlite"
                    ) from None
                print(f"PostgreSQL: started a private server ({why} on the default URL)")
        for measurement in opts.measurements:
            for engine in opts.engines:
                load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
                print(f"\n{measurement} on {engine} (load average {load})", flush=True)
                figures += await RUNNERS[measurement](engine, opts, workdir)
    finally:
        if fallback is not None:
            fallback.stop()
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n" + summary(figures), flush=True)
    if opts.json_path:
        _write_json(Path(opts.json_path), opts, figures)
    return figures


def _workdir(given: str | None) -> Path:
    path = Path(given or tempfile.mkdtemp(prefix="hipq-bench-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _write_json(path: Path, opts: BenchOptions, figures: list[Figure]) -> None:
    body = {"machine": machine(), "options": asdict(opts), "figures": [asdict(f) for f in figures]}
    path.write_text(json.dumps(body, indent=2) + "\n")


def summary(figures: list[Figure]) -> str:
    """The figures as a Markdown table."""
    rows = [
        "| engine | measurement | figure | value | target | note |",
        "|---|---|---|---:|---|---|",
    ]
    for f in figures:
        rows.append(
            f"| {f.engine} | {f.measurement} | {f.name} | {_fmt(f.value)} {f.unit} | "
            f"{f.target} | {f.note} |"
        )
    return "\n".join(rows)
