"""The ``hipq`` command: serve, migrate, and an operator's client of the REST API."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hipq.commands import healthcheck as cli_healthcheck
from hipq.commands import openapi as cli_openapi
from hipq.commands import worker as cli_worker
from hipq.commands.batches import batches_app
from hipq.commands.flags import flags_app
from hipq.commands.jobs_bulk import add_verbs, bulk_app
from hipq.commands.limits import limits_change
from hipq.commands.options import (
    ConfigOpt,
    LabelOpt,
    UrlOpt,
    api,
    command_group,
    fail,
    label_map,
    name_the_values,
    parse_json,
    print_body,
    settings_or_fail,
)
from hipq.commands.responses import responses_app
from hipq.commands.schedules import app as schedules_app
from hipq.commands.tokens import tokens_app

if TYPE_CHECKING:
    from hipq.config import Settings
    from hipq.security.tokens import Tokens

# Only what every command needs is imported above: `hipq --help` and the API client's
# calls must not pay for the service (FastAPI, SQLAlchemy) or the config's models,
# so each command imports what it uses (tests/test_cli.py).

app = command_group(
    help="hipq: durable, throttled jobs against external systems.",
    no_args_is_help=True,
)
jobs_app = command_group(
    help="Add, inspect, cancel and retry jobs (through the REST API).", no_args_is_help=True
)
app.add_typer(jobs_app, name="jobs")
app.add_typer(batches_app, name="batches")
app.add_typer(tokens_app, name="tokens")
app.add_typer(cli_healthcheck.app, name="healthcheck")
jobs_app.add_typer(bulk_app, name="bulk")
add_verbs(jobs_app)
app.add_typer(responses_app, name="responses")
app.add_typer(flags_app, name="flags")
app.add_typer(cli_openapi.app, name="openapi")
app.command(name="worker")(cli_worker.worker)


@app.command()
def serve(
    config: ConfigOpt = None,
    host: Annotated[str | None, typer.Option(help="overrides server.host")] = None,
    port: Annotated[int | None, typer.Option(help="overrides server.port")] = None,
    queues: Annotated[
        str | None,
        typer.Option(help="run only these queues' loops (comma-separated; overrides serve_queues)"),
    ] = None,
) -> None:
    """Run the API and the queues' loops."""
    from hipq.security.tokens import TokenConfigError, exposure_problem, load_tokens

    settings = settings_or_fail(config)

    if queues is not None:
        names = [q.strip() for q in queues.split(",") if q.strip()]
        unknown = [q for q in names if q not in settings.queues]
        if unknown or not names:
            known = ", ".join(sorted(settings.queues))
            fail(
                f"--queues: unknown queue {unknown[0]!r} ({known})"
                if unknown
                else "--queues: name at least one queue"
            )
        settings.serve_queues = names
    _refuse_a_served_sqlite_file(settings.database_url)  # before the heavy imports
    if host:
        settings.server.host = host
    if port is not None:
        settings.server.port = port
    try:
        tokens = load_tokens(settings.auth.tokens_file)
        tokens.check_restrictions(
            settings.queues, settings.job_types, settings.notifications.targets
        )
    except TokenConfigError as exc:
        fail(str(exc))
    exposed = exposure_problem(settings.server.host, tokens, settings.auth.behind_gateway)
    if exposed:
        fail(exposed)
    from hipq.observability.lifecycle_log import configure_logging

    configure_logging(settings.log_level, settings.logging.format)
    from hipq.observability import tracing

    try:
        tracing.configure_from_env()  # the hipq[otel] extra, set up by OTEL_* variables
    except Exception as exc:
        fail(f"OpenTelemetry: {exc}")
    # While serving, SIGTERM and SIGINT are hipq.commands.stop_signals'. Before that (the service
    # starting), SIGTERM's default action would kill the process without any cleanup: as
    # KeyboardInterrupt it unwinds. (Outside the main thread signals cannot be set.)
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        _event_loop_runner()(_serve(settings, tokens))
    except KeyboardInterrupt:
        pass


def _refuse_a_served_sqlite_file(database_url: str) -> None:
    """A SQLite file another ``hipq serve`` holds ends this one at once, not after the
    imports and the start (tens of seconds on a loaded machine). The service takes the
    lock itself when it starts; this only looks."""
    import fcntl

    from hipq.config import sqlite_lock_path, sqlite_served_message

    path = sqlite_lock_path(database_url)
    if path is None or not path.exists():
        return
    with open(path) as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock.read().strip() or "another process"
            fail(sqlite_served_message(path.with_suffix(""), holder))
        fcntl.flock(lock, fcntl.LOCK_UN)


def _event_loop_runner() -> Callable[[Coroutine[Any, Any, None]], None]:
    """uvloop's event loop where it is installed (a dependency except on Windows),
    asyncio's elsewhere. With uvloop a single-job POST took 10-17 % less of the
    server's CPU and one client's rate rose by about a tenth (benchmarks/README.md)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


async def _serve(settings: Settings, tokens: Tokens) -> None:
    from hipq.app import create_app
    from hipq.commands.stop_signals import Server, StopSignals
    from hipq.config import ConfigError
    from hipq.process import runtime
    from hipq.service import ServiceError, build_service
    from hipq.store import StoreSetupError

    try:
        service = build_service(settings)
    except (ServiceError, StoreSetupError, ConfigError) as exc:
        fail(str(exc))
    # The port first: one taken ends serve here, before the database is opened or any
    # queue's lease is taken, and before uvicorn announces an application start.
    listener = listen(settings.server.host, settings.server.port)
    app = create_app(service, manage_service=False, tokens=tokens)
    server = Server(server_config(app, settings))
    signals = StopSignals(service, server)
    signals.install()
    # The HTTP server comes up first: while the service waits for its database,
    # /healthz answers 200 and /readyz 503 (the API's routes 503 with Retry-After).
    # Its start-up lines are held back meanwhile: a start that fails prints one line.
    server_log = logging.getLogger("uvicorn.error")
    # uvicorn's "Finished server process" comes when the HTTP server has stopped, before
    # the drain of the jobs in flight: hipq says "stopped" itself, at the very end.
    server_log.addFilter(_not_finished_server_process)
    level = server_log.level
    server_log.setLevel(logging.WARNING)
    serving = asyncio.ensure_future(server.serve(sockets=[listener]))
    stopped_cleanly = False  # an error's line stays the last one
    try:
        if not await _start_while_serving(service, server, serving):
            stopped_cleanly = True
            return  # stopped (a signal) before the service was up
        server_log.setLevel(level)
        server_log.info(
            "hipq serving on http://%s:%d (Press CTRL+C to quit)",
            settings.server.host,
            settings.server.port,
        )
        runtime.settle_after_start()
        await serving
        if not server.started:
            fail(f"cannot listen on {settings.server.host}:{settings.server.port}")
        stopped_cleanly = True
    except (ServiceError, StoreSetupError, ConfigError) as exc:
        await _stop_server(server, serving)
        fail(str(exc))
    except OSError as exc:
        await _stop_server(server, serving)
        fail(f"cannot open the database: {exc}")
    finally:
        # Also when uvicorn ended for another reason: nothing new is claimed from here.
        service.begin_stop()
        # A cancellation (Ctrl-C before the signals were ours) must not cut Service.stop()
        # short: the queues' leases would stay held, and a restarted hipq would wait
        # lease_ttl before its loops run.
        stopping = asyncio.ensure_future(service.stop())
        try:
            await asyncio.shield(stopping)
        except asyncio.CancelledError:
            await stopping
        if stopped_cleanly:
            logging.getLogger("hipq.serve").warning("stopped")


def _not_finished_server_process(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Finished server process")


def server_config(app: Any, settings: Settings) -> Any:
    """The ``uvicorn.Config`` that ``hipq serve`` runs ``app`` with (also the benchmarks')."""
    import uvicorn

    from hipq.api.connection_limits import ConnectionLimits
    from hipq.api.slow_clients import header_timeout_protocol

    return uvicorn.Config(
        app,
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.log_level,
        log_config=None,  # its lines go through hipq's handler and format
        access_log=False,
        # Beyond this many connections at once the server answers 503 at once.
        limit_concurrency=settings.server.max_connections,
        http=header_timeout_protocol(
            settings.server.header_read_timeout,
            ConnectionLimits(
                settings.server.max_connections_per_peer, settings.server.unlimited_peers
            ),
        ),
        # Requests under way at a stop get the same grace as the jobs in flight.
        timeout_graceful_shutdown=max(1, round(settings.shutdown_grace)),
    )


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound now; a port in use fails with one line."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        # SO_REUSEADDR (create_server's default on POSIX), as uvicorn binds: a port in
        # TIME_WAIT after a restart is free, one another process listens on is not.
        listener = socket.create_server((host, port), family=family)
        # Named as TCP so that asyncio sets TCP_NODELAY on each accepted connection (it
        # does only for sockets whose proto says TCP; create_server leaves it 0): without
        # it every answer waited ~40 ms for the client's delayed ACK.
        return socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, listener.detach())
    except OSError as exc:
        fail(f"cannot listen on {host}:{port}: {os.strerror(exc.errno) if exc.errno else exc}")


async def _start_while_serving(service: Any, server: Any, serving: asyncio.Future[Any]) -> bool:
    """Start ``service`` while the HTTP server runs; False if the server ended first."""
    starting = asyncio.ensure_future(service.start())
    await asyncio.wait({starting, serving}, return_when=asyncio.FIRST_COMPLETED)
    if starting.done():
        starting.result()  # a start that failed raises here
        return True
    starting.cancel()
    with contextlib.suppress(BaseException):
        await starting
    if not server.started:
        fail(f"cannot listen on {server.config.host}:{server.config.port}")
    return False


async def _stop_server(server: Any, serving: asyncio.Future[Any]) -> None:
    server.should_exit = True
    with contextlib.suppress(BaseException):
        await serving


@app.command()
def migrate(config: ConfigOpt = None) -> None:
    """Apply pending database migrations."""
    settings = settings_or_fail(config)

    async def run() -> str:
        from hipq.store import Store

        store = Store.from_url(settings.database_url)
        try:
            return await store.schema_upgrade()
        finally:
            await store.close()

    try:
        revision = asyncio.run(run())
    except Exception as exc:
        fail(f"migration failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    typer.echo(f"database at revision {revision}")


# -- the API client ------------------------------------------------------------------


@jobs_app.command("add")
def jobs_add(
    type: Annotated[str, typer.Argument(metavar="TYPE", help="job type from the config")],
    payload: Annotated[str, typer.Option(metavar="JSON", help="JSON object")] = "{}",
    queue: Annotated[str | None, typer.Option(metavar="QUEUE")] = None,
    run_at: Annotated[str | None, typer.Option(metavar="WHEN", help="RFC 3339 instant")] = None,
    run_in: Annotated[
        str | None, typer.Option(metavar="DURATION", help="not before this long from now: 90s, 2h")
    ] = None,
    priority: Annotated[int | None, typer.Option(metavar="N", help="lower runs first")] = None,
    weight: Annotated[int | None, typer.Option(metavar="N", help="capacity units")] = None,
    label: LabelOpt = None,
    timeout: Annotated[str | None, typer.Option(metavar="DURATION", help="e.g. 30s, 24h")] = None,
    job_key: Annotated[str | None, typer.Option(metavar="KEY")] = None,
    job_key_mode: Annotated[
        str | None,
        typer.Option(metavar="MODE", help="replace (default), preserve_run_at or unsafe_dedupe"),
    ] = None,
    unique_for: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="with --job-key: a job with the key created this recently is returned: 1h",
        ),
    ] = None,
    correlation_key: Annotated[str | None, typer.Option(metavar="KEY")] = None,
    flag: Annotated[
        list[str] | None, typer.Option(metavar="FLAG", help="a flag of the job, repeatable")
    ] = None,
    notify: Annotated[
        list[str] | None,
        typer.Option(metavar="TARGET", help="a notification target, repeatable (default: type's)"),
    ] = None,
    notify_none: Annotated[
        bool, typer.Option("--notify-none", help="tell no target, not even the type's")
    ] = False,
    after: Annotated[
        list[str] | None,
        typer.Option(metavar="ID|KEY", help="a job it runs after (an id or a job key), repeatable"),
    ] = None,
    after_failed: Annotated[
        str | None,
        typer.Option(metavar="cancel|run", help="if a job it runs after fails (default cancel)"),
    ] = None,
    batch: Annotated[
        int | None,
        typer.Option(metavar="ID", help="join this batch (open, or sealed and not finished)"),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option(metavar="KEY", help="the same key again returns the same job"),
    ] = None,
    critical: Annotated[bool, typer.Option(help="bypass throttlers that allow it")] = False,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Create a job and print it."""
    if notify and notify_none:
        fail("--notify and --notify-none exclude each other")
    fields: dict[str, Any] = {
        "queue": queue,
        "run_at": run_at,
        "run_in": run_in,
        "priority": priority,
        "weight": weight,
        "timeout": timeout,
        "job_key": job_key,
        "job_key_mode": job_key_mode,
        "unique_for": unique_for,
        "correlation_key": correlation_key,
        "labels": label_map(label) if label else None,
        "flags": flag or None,
        "notify": [] if notify_none else notify or None,
        "critical": True if critical else None,
        "after": [int(a) if a.isdigit() else a for a in after] if after else None,
        "after_failed": after_failed,
        "batch_id": batch,
    }
    body = parse_json(payload, "--payload")
    chosen = {k: v for k, v in fields.items() if v is not None}
    with api(url, config) as client:
        print_body(client.add_job(type, body, idempotency_key=idempotency_key, **chosen))


@jobs_app.command("list")
def jobs_list(
    queue: str | None = None,
    state: Annotated[list[str] | None, typer.Option(help="repeatable")] = None,
    type: str | None = None,
    label: LabelOpt = None,
    limit: int = 50,
    cursor: str | None = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """List jobs, newest first."""
    labels = label_map(label)
    with api(url, config) as client:
        page = client.list_jobs(
            queue=queue, states=state, type=type, labels=labels, limit=limit, cursor=cursor
        )
    if as_json:
        print_body(page)
        return
    typer.echo(
        f"{'ID':>8}  {'STATE':<10} {'QUEUE':<12} {'TYPE':<20} {'ATT':>3}  RUN_AT  WAITING / ERROR"
    )
    for job in page.jobs:
        # Why it waits and what failed last are two things: a retry waits with both.
        notes = [f"waiting: {job.waiting_reason}"] if job.waiting_reason else []
        notes += [f"error: {job.last_error}"] if job.last_error else []
        note = "; ".join(notes)
        run_at = job.model_dump(mode="json", include={"run_at"})["run_at"]
        typer.echo(
            f"{job.id:>8}  {job.state:<10} {job.queue:<12} {job.type:<20} "
            f"{job.attempt:>3}  {run_at}  {note}"
        )
    if page.next_cursor:
        typer.echo(f"more: --cursor {page.next_cursor}")


@jobs_app.command("show")
def jobs_show(job_id: int, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """A job with its attempts."""
    with api(url, config) as client:
        print_body(client.get_job(job_id))


@jobs_app.command("cancel")
def jobs_cancel(
    job_id: int,
    reason: Annotated[
        str | None, typer.Option(metavar="TEXT", help="why: kept as the job's last_error")
    ] = None,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Cancel a job (a running one at its queue's next tick)."""
    with api(url, config) as client:
        print_body(client.cancel_job(job_id, reason))


@jobs_app.command("retry")
def jobs_retry(job_id: int, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Run a failed or cancelled job again."""
    with api(url, config) as client:
        print_body(client.retry_job(job_id))


@jobs_app.command("wait")
def jobs_wait(
    job_id: int,
    timeout: Annotated[float, typer.Option(help="seconds to wait at most")] = 60.0,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Wait until a job is completed, failed or cancelled, and print it (exit 1 if it
    is still open after --timeout)."""
    with api(url, config) as client:
        print_body(client.wait(job_id, timeout))


@app.command()
def queues(
    name: Annotated[str | None, typer.Argument(help="one queue")] = None,
    pause: bool = False,
    resume: bool = False,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="change a limit at run time: concurrency=50, throttlers.0.limit=5, "
            'throttlers.1.per=10s, throttlers.0.shares=\'{"east": 50, "west": 50}\'',
        ),
    ] = None,
    reset_limits: Annotated[
        bool, typer.Option("--reset-limits", help="back to the config's limits")
    ] = False,
    url: UrlOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Queues with live counts; --pause / --resume one, --set its limits or
    --reset-limits."""
    verbs = [
        v
        for v, on in (
            ("--pause", pause),
            ("--resume", resume),
            ("--set", bool(set_)),
            ("--reset-limits", reset_limits),
        )
        if on
    ]
    if verbs and not name:
        fail(f"{verbs[0]} needs a queue name")
    if len(verbs) > 1:
        fail(f"choose one of {', '.join(verbs)}")
    change = limits_change(set_ or [])
    with api(url, config) as client:
        if name:
            if pause:
                print_body(client.pause_queue(name))
            elif resume:
                print_body(client.resume_queue(name))
            elif change:
                print_body(client.change_limits(name, change))
            elif reset_limits:
                print_body(client.reset_limits(name))
            else:
                print_body(client.get_queue(name))
            return
        found = client.list_queues()
    typer.echo(
        f"{'QUEUE':<14} {'SCHED':>7} {'DUE':>7} {'RUN':>6} {'AWAIT':>6} {'FAILED':>6} "
        f"{'IN USE':>8}  OWNER"
    )
    for q in found:
        cap = f"{q.capacity_in_use}/{q.concurrency or '∞'}"
        typer.echo(
            f"{q.name:<14} {q.scheduled:>7} {q.due:>7} {q.running:>6} "
            f"{q.awaiting:>6} {q.failed:>6} {cap:>8}  "
            f"{'paused ' if q.paused else ''}{q.owner or '-'}"
        )


def main() -> None:
    # httpx imports its own command line (click, rich, pygments) when those are
    # installed, as typer's dependencies are: half of httpx's import, for a `main` this
    # process never runs. A None in sys.modules makes that import fail, which httpx
    # expects (it then defines a stub). The command's process only, not the library's.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    try:
        command = typer.main.get_command(app)
        name_the_values(command)
        # Without standalone mode a command's Exit comes back as the return value.
        code = command.main(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else 0)
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        sys.exit(1)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":
            # `hipq` (or `hipq jobs`) alone asks for the help, which the error carries.
            typer.echo(exc.format_message() if hasattr(exc, "format_message") else str(exc))
            sys.exit(0)
        # Usage errors (bad option, unknown command): one readable line, not a panel.
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        typer.echo(f"error: {message}", err=True)
        sys.exit(getattr(exc, "exit_code", 2) or 2)
    except BrokenPipeError:
        sys.exit(1)


@app.command()
def bench(
    measurements: Annotated[
        list[str] | None,
        typer.Argument(help="enqueue, process, latency, memory (default: all four)"),
    ] = None,
    engine: Annotated[str, typer.Option(help="sqlite, postgres or both")] = "both",
    postgres_url: Annotated[
        str,
        typer.Option(
            envvar="HIPQ_BENCH_POSTGRES_URL",
            help="a server on which to create and drop a database hipq_bench_<pid>",
        ),
    ] = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres",
    batches: Annotated[int, typer.Option(help="enqueue: batch POSTs")] = 50,
    batch_size: Annotated[int, typer.Option(help="enqueue: jobs per batch POST")] = 1000,
    batch_clients: Annotated[int, typer.Option(help="enqueue: concurrent batch clients")] = 4,
    single_jobs: Annotated[int, typer.Option(help="enqueue: one-job POSTs")] = 5000,
    single_clients: Annotated[int, typer.Option(help="enqueue: concurrent one-job clients")] = 16,
    backlog: Annotated[int, typer.Option(help="process: jobs in the backlog")] = 50_000,
    process_batch_size: Annotated[int, typer.Option(help="process: the queue's batch_size")] = 1000,
    latency_jobs: Annotated[int, typer.Option(help="latency: jobs posted one at a time")] = 200,
    memory_jobs: Annotated[int, typer.Option(help="memory: jobs in the database")] = 1_000_000,
    memory_seconds: Annotated[float, typer.Option(help="memory: how long each run serves")] = 10.0,
    memory_concurrency: Annotated[
        int, typer.Option(help="memory: the queue's concurrency in the due-jobs run")
    ] = 10,
    workdir: Annotated[
        str | None,
        typer.Option(help="where SQLite files, configs and logs go (default: a temporary folder)"),
    ] = None,
    json_path: Annotated[
        str | None, typer.Option("--json", help="also write the figures to this file")
    ] = None,
) -> None:
    """Measure hipq's core on this machine: enqueue rate, processing rate, idle latency, memory.

    Prints figures next to their targets and asserts nothing.

    Each database is made for the run and removed after it; traffic stays on 127.0.0.1.
    """
    from hipq.commands import bench as benchmarks

    engines = {"both": benchmarks.ENGINES, "sqlite": ("sqlite",), "postgres": ("postgres",)}
    if engine not in engines:
        fail(f"--engine must be sqlite, postgres or both, not {engine!r}")
    unknown = [m for m in measurements or [] if m not in benchmarks.MEASUREMENTS]
    if unknown:
        fail(f"unknown measurement {unknown[0]!r} (known: {', '.join(benchmarks.MEASUREMENTS)})")
    options = benchmarks.BenchOptions(
        measurements=tuple(measurements or benchmarks.MEASUREMENTS),
        engines=engines[engine],
        postgres_url=postgres_url,
        batches=batches,
        batch_size=batch_size,
        batch_clients=batch_clients,
        single_jobs=single_jobs,
        single_clients=single_clients,
        backlog=backlog,
        process_batch_size=process_batch_size,
        latency_jobs=latency_jobs,
        memory_jobs=memory_jobs,
        memory_seconds=memory_seconds,
        memory_concurrency=memory_concurrency,
        workdir=workdir,
        json_path=json_path,
    )
    logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(benchmarks.run(options))
    except KeyboardInterrupt:
        fail("interrupted")
    except RuntimeError as exc:
        fail(str(exc))


# Last: the module uses the client helpers above.


app.add_typer(schedules_app, name="schedules")
