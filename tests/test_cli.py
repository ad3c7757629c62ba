"""The `hipq` command as an operator uses it: a real `hipq serve`, and the CLI as subprocesses.

A client command that fails exits non-zero with one readable line on stderr; `serve`
refuses a bad config, a schema that is behind, and a second process on one SQLite file.
Independent commands run concurrently to keep the module fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.services import READY_TIMEOUT, stop_process

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
HIPQ = str(Path(sys.executable).with_name("hipq"))
JOB_TYPES = {
    name: {
        "transport": {"python": {"handler": f"tests.handlers:{name}"}},
        "retry": {"strategy": "none"},
    }
    for name in ("ok", "fail", "hang", "permanent")
}


def _env() -> dict[str, str]:
    # A developer's HIPQ_ variables would override the test's config and --url.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env["NO_COLOR"] = "1"
    return env


def _die_with_parent() -> None:
    # Linux: a server still running when the test process dies gets SIGKILL.
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(path: Path, db: Path, **overrides: Any) -> Path:
    config: dict[str, Any] = {
        "database_url": f"sqlite+aiosqlite:///{db}",
        "migrate_on_start": True,
        "log_level": "warning",
        "queues": {"default": {"concurrency": 20, "batch_interval": "200ms"}},
        "job_types": JOB_TYPES,
    }
    config.update(overrides)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass
class Result:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self
        return json.loads(self.out)

    def one_error_line(self) -> str:
        """The command failed with exactly one readable line on stderr."""
        assert self.code != 0, self
        lines = [line for line in self.err.splitlines() if line.strip()]
        assert len(lines) == 1, self
        assert "Traceback" not in self.err, self
        return lines[0]


def hipq_many(*commands: list[str], timeout: float = 60) -> list[Result]:
    """Run several `hipq` commands at once; their results in order."""
    procs = [
        subprocess.Popen(
            [HIPQ, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=REPO,
        )
        for args in commands
    ]
    results = []
    try:
        for args, proc in zip(commands, procs, strict=True):
            out, err = proc.communicate(timeout=timeout)
            results.append(Result(tuple(args), proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def hipq(*args: str) -> Result:
    return hipq_many(list(args))[0]


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g}s (last: {last!r})")
        time.sleep(0.05)


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(
                f"hipq serve exited with {self.process.returncode}:\n{self.log_text()}"
            )
        try:
            return httpx.get(f"{self.url}/readyz", timeout=30).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        stop_process(self.process)


@contextlib.contextmanager
def serving(config: Path, log: Path, env: dict[str, str] | None = None) -> Iterator[Server]:
    """`hipq serve` on a free port, ready; stopped (killed if need be) afterwards.
    ``env``: variables (e.g. HIPQ_...) set for it on top of the test's environment."""
    port = free_port()
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [HIPQ, "serve", "--config", str(config), "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**_env(), **(env or {})},
            cwd=REPO,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    server = Server(process, port, log)
    try:
        wait_for(server.ready, READY_TIMEOUT, "hipq serve ready")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("cli")
    config = write_config(tmp / "hipq.yaml", tmp / "hipq.db")
    with serving(config, tmp / "serve.log") as running:
        yield running


def job_state(server: Server, job_id: int) -> str:
    return httpx.get(f"{server.url}/v1/jobs/{job_id}", timeout=30).json()["state"]


def wait_state(server: Server, job_id: int, state: str) -> None:
    wait_for(lambda: job_state(server, job_id) == state, 10, f"job {job_id} {state}")


# -- the API client commands ------------------------------------------------------------


def api_post(server: Server, path: str, body: Any) -> Any:
    response = httpx.post(f"{server.url}{path}", json=body, timeout=30)
    assert response.status_code < 300, response.text
    return response.json()


def test_jobs_add_show_list_cancel_retry(server: Server) -> None:
    url = ["--url", server.url]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    added = hipq_many(
        [
            "jobs",
            "add",
            "ok",
            "--payload",
            '{"n": 1}',
            "--label",
            "region:east",
            "--priority",
            "5",
            "--timeout",
            "30s",
            "--job-key",
            "k-1",
            *url,
        ],
        ["jobs", "add", "permanent", "--critical", "--weight", "2", "--run-at", future, *url],
    )
    first, doomed = (r.json() for r in added)
    assert first["type"] == "ok" and first["payload"] == {"n": 1}
    assert first["labels"] == {"region": "east"}
    assert first["priority"] == 5 and first["timeout"] == 30 and first["job_key"] == "k-1"
    assert doomed["critical"] is True and doomed["weight"] == 2
    assert doomed["state"] == "scheduled" and doomed["run_at"].startswith(future[:16])
    later = api_post(server, "/v1/jobs", {"type": "ok", "run_at": future})
    hanging = api_post(server, "/v1/jobs", {"type": "hang"})
    api_post(server, f"/v1/jobs/{doomed['id']}/cancel", {})
    wait_state(server, first["id"], "completed")
    wait_state(server, hanging["id"], "running")

    shown, cancelled, cancel_asked, retried = hipq_many(
        ["jobs", "show", str(first["id"]), *url],
        ["jobs", "cancel", str(later["id"]), *url],
        ["jobs", "cancel", str(hanging["id"]), *url],
        ["jobs", "retry", str(doomed["id"]), *url],
    )
    job = shown.json()
    assert job["state"] == "completed"
    assert job["result"] == {"echo": {"n": 1}}
    assert [a["outcome"] for a in job["attempts"]] == ["completed"]
    assert cancelled.json()["state"] == "cancelled"
    assert cancel_asked.json()["cancel_requested"] is True
    assert retried.json()["state"] == "scheduled"
    wait_state(server, hanging["id"], "cancelled")
    wait_state(server, doomed["id"], "failed")  # retried now, it ran (and failed)

    table, closed, east, paged = hipq_many(
        ["jobs", "list", *url],
        ["jobs", "list", "--state", "failed", "--state", "cancelled", "--json", *url],
        ["jobs", "list", "--label", "region:east", "--json", *url],
        ["jobs", "list", "--limit", "1", *url],
    )
    assert table.code == 0, table
    header, *rows = table.out.splitlines()
    assert header.split()[:3] == ["ID", "STATE", "QUEUE"]
    by_id = {int(row.split()[0]): row.split() for row in rows}
    assert by_id[first["id"]][1:4] == ["completed", "default", "ok"]
    assert by_id[doomed["id"]][1:4] == ["failed", "default", "permanent"]
    assert "will never work" in " ".join(by_id[doomed["id"]])  # the last error
    expected = sorted((doomed["id"], hanging["id"], later["id"]), reverse=True)
    assert [j["id"] for j in closed.json()["jobs"]] == expected
    assert [j["id"] for j in east.json()["jobs"]] == [first["id"]]
    assert paged.code == 0 and "more: --cursor" in paged.out, paged
    assert len(paged.out.splitlines()) == 3  # header, one job, the cursor hint


def test_jobs_add_with_every_option_a_post_takes(server: Server) -> None:
    url = ["--url", server.url]
    later, keyed, again, silent = hipq_many(
        ["jobs", "add", "ok", "--run-in", "1h", "--flag", "slow", "--flag", "big", *url],
        ["jobs", "add", "ok", "--idempotency-key", "cli-1", "--payload", '{"n": 7}', *url],
        ["jobs", "add", "ok", "--idempotency-key", "cli-1", "--payload", '{"n": 7}', *url],
        ["jobs", "add", "ok", "--notify-none", *url],
    )
    job = later.json()
    assert job["state"] == "scheduled" and sorted(job["flags"]) == ["big", "slow"]
    run_at = datetime.fromisoformat(job["run_at"])
    assert timedelta(minutes=55) < run_at - datetime.now(UTC) <= timedelta(hours=1)
    assert keyed.json()["id"] == again.json()["id"]
    assert silent.json()["notify"] is None  # no targets: no outbox row
    both, unknown = hipq_many(
        ["jobs", "add", "ok", "--notify", "x", "--notify-none", *url],
        ["jobs", "add", "ok", "--notify", "nobody", *url],
    )
    assert "--notify and --notify-none" in both.one_error_line()
    assert "nobody" in unknown.one_error_line()


def test_help_names_what_an_option_takes() -> None:
    shown = hipq("jobs", "add", "--help")
    assert shown.code == 0, shown
    for metavar in ("JSON", "DURATION", "NAME:VALUE", "URL", "FILE", "TARGET"):
        assert metavar in shown.out, shown.out
    assert "<list[str]>" not in shown.out, shown.out
    # A group named alone prints its help (exit 0), as `--help` does.
    for alone in [(), ("jobs",)]:
        shown = hipq(*alone)
        assert shown.code == 0 and shown.out.startswith("Usage: hipq"), shown
        assert "Commands:" in shown.out, shown


def test_no_command_shows_a_type_as_a_placeholder() -> None:
    """Every command's help, as `hipq ... --help` builds it: a name (QUEUE, N), never
    typer's <str> or <list[str]>."""
    import click
    import typer

    from hipq.commands.main import app
    from hipq.commands.options import name_the_values

    root = typer.main.get_command(app)
    name_the_values(root)

    def helps(command: click.Command, path: list[str]) -> Iterator[tuple[str, str]]:
        ctx = click.Context(command, info_name=" ".join(path))
        yield " ".join(path), command.get_help(ctx)
        for name, sub in getattr(command, "commands", {}).items():
            yield from helps(sub, [*path, name])

    shown = dict(helps(root, ["hipq"]))
    assert "hipq jobs list" in shown and "hipq worker" in shown
    for path, text in shown.items():
        placeholders = re.findall(r"<(?:str|int|float|list\[\w+\])>", text)
        assert not placeholders, f"{path} --help shows {placeholders}:\n{text}"


def test_queues(server: Server) -> None:
    url = ["--url", server.url]
    table, one, paused = hipq_many(
        ["queues", *url], ["queues", "default", *url], ["queues", "default", "--pause", *url]
    )
    assert table.code == 0, table
    header, *rows = table.out.splitlines()
    assert header.split()[:3] == ["QUEUE", "SCHED", "DUE"]
    assert [r.split()[0] for r in rows] == ["default"]
    assert "/20" in rows[0]  # capacity in use out of the concurrency
    assert one.json()["name"] == "default" and one.json()["concurrency"] == 20
    assert paused.json()["paused"] is True

    job = api_post(server, "/v1/jobs", {"type": "ok"})
    time.sleep(0.5)  # a few ticks of the 200ms loop: nothing may start
    assert job_state(server, job["id"]) == "scheduled"
    listed, shown = hipq_many(
        ["jobs", "list", "--state", "scheduled", "--queue", "default", *url],
        ["jobs", "show", str(job["id"]), *url],
    )
    row = next(r for r in listed.out.splitlines() if r.split()[0] == str(job["id"]))
    assert row.endswith("waiting: queue paused"), listed.out
    assert shown.json()["waiting_reason"] == "queue paused"
    assert hipq("queues", "default", "--resume", *url).json()["paused"] is False
    wait_state(server, job["id"], "completed")


def test_queue_limits_are_set_and_reset(server: Server) -> None:
    url = ["--url", server.url]
    changed, bad, both = hipq_many(
        ["queues", "default", "--set", "concurrency=30", *url],
        ["queues", "default", "--set", "concurrency=0", *url],
        ["queues", "default", "--set", "concurrency=3", "--reset-limits", *url],
    )
    assert changed.code == 0, changed
    assert changed.json()["concurrency"] == 30
    assert changed.json()["limits"]["overrides"] == {"concurrency": 30}
    assert bad.code != 0 and "concurrency" in bad.one_error_line()
    assert both.code != 0 and "choose one of" in both.one_error_line()
    reset = hipq("queues", "default", "--reset-limits", *url)
    assert reset.code == 0, reset
    assert reset.json()["concurrency"] == 20 and reset.json()["limits"]["overrides"] == {}
    odd = hipq("queues", "default", "--set", "speed=3", *url)
    assert odd.code != 0 and "throttlers.INDEX.SETTING" in odd.one_error_line()


def test_bad_input_is_one_readable_line(server: Server) -> None:
    url = ["--url", server.url]
    done = api_post(server, "/v1/jobs", {"type": "ok"})
    wait_state(server, done["id"], "completed")
    cases = [
        (["jobs", "add", "ok", "--payload", "{bad json", *url], "--payload"),
        (["jobs", "add", "ok", "--payload", '{"x": NaN}', *url], "--payload"),
        (["jobs", "add", "nope", *url], "unknown job type 'nope'"),
        (["jobs", "add", "ok", "--label", "region", *url], "--label"),
        (["jobs", "add", "ok", "--run-at", "tomorrow", *url], "run_at"),
        (["jobs", "show", "987654", *url], "job 987654 does not exist"),
        (["jobs", "cancel", str(done["id"]), *url], "completed"),
        (["jobs", "list", "--url", f"http://127.0.0.1:{free_port()}"], "cannot reach hipq"),
        (["queues", "nope", *url], "'nope' is not configured"),
        (["jobs", "show", "abc", *url], "valid integer"),
        (["jobs", "frobnicate"], "No such command 'frobnicate'"),
        (["jobs", "add", "ok", "--weight", *url], "--weight"),
    ]
    results = hipq_many(*(args for args, _ in cases))
    for result, (_, text) in zip(results, cases, strict=True):
        line = result.one_error_line()
        assert line.startswith("error: "), result
        assert text in line, result
        assert result.out == "", result


# -- serve and migrate ------------------------------------------------------------------


def test_serve_refuses_a_bad_config(tmp_path: Path) -> None:
    db = tmp_path / "hipq.db"
    configs = {
        "queues.default.concurency": {"queues": {"default": {"concurency": 5}}},
        "queues.default.concurrency": {"queues": {"default": {"concurrency": -1}}},
        "job_types.ok.transport.python": {
            "job_types": {"ok": {"transport": {"python": {"handler": "tests.handlers:absent"}}}}
        },
        # A job type answered only by webhook: its rule was first read by a callback (a 500).
        # At the default log level: nothing else may be printed before the error.
        "job_types.pay.outcome": {
            "log_level": "info",
            "job_types": {
                "pay": {
                    "correlation_key": "{payload.id}",
                    "outcome": {"field": "a..b", "success": ["ok"]},
                    "transport": {"kafka": {"topic": "requests"}},
                }
            },
        },
        "serve_queues: unknown queue 'nope'": {"serve_queues": ["nope"]},
        # Likewise a webhook secret that cannot be a key: every callback was a 401.
        "job_types.ok.callback_signature.secret": {
            "job_types": {
                "ok": {
                    "transport": {"python": {"handler": "tests.handlers:ok"}},
                    "callback_signature": {"secret": "whsec_!!!"},
                }
            }
        },
        # A malformed database URL ended in a 70-line traceback (its password shown).
        "database_url": {"database_url": "postgresql+asyncpg://u:pw-x7@db:notaport/hipq"},
        "database_url: cannot": {"database_url": "sqlite+aiosqlite//no-slashes"},
        # Its host "[bad" parsed: the start waited a minute as if the database were down.
        "database_url: cannot be read as a database URL: its host": {
            "database_url": "postgresql+asyncpg://u:pw-x7@[bad:5432/db"
        },
    }
    paths = [
        write_config(tmp_path / f"bad{i}.yaml", db, **overrides)
        for i, overrides in enumerate(configs.values())
    ]
    missing = str(tmp_path / "missing.yaml")
    good = str(write_config(tmp_path / "good.yaml", db))
    results = hipq_many(
        *(["serve", "--config", str(p), "--port", str(free_port())] for p in paths),
        ["serve", "--config", missing],
        ["serve", "--config", good, "--queues", "default,nope"],
    )
    keys = [*configs, missing, "--queues: unknown queue 'nope' (default)"]
    for key, result in zip(keys, results, strict=True):
        line = result.one_error_line()
        assert key in line, result
        assert "pw-x7" not in result.err
    assert "Extra inputs are not permitted" in results[0].err
    assert not db.exists()  # refused before touching the database


def test_migrate_then_serve_once_per_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    config = write_config(tmp_path / "hipq.yaml", db, migrate_on_start=False)
    refused = hipq("serve", "--config", str(config), "--port", str(free_port()))
    line = refused.one_error_line()
    assert "hipq migrate" in line, refused

    migrated = hipq("migrate", "--config", str(config))
    assert migrated.code == 0, migrated
    assert migrated.out.startswith("database at revision "), migrated

    with serving(config, tmp_path / "first.log") as first:
        job = api_post(first, "/v1/jobs", {"type": "ok"})
        wait_state(first, job["id"], "completed")
        second = hipq("serve", "--config", str(config), "--port", str(free_port()))
        line = second.one_error_line()
        assert "already served" in line and "one hipq process per database file" in line, second
        assert f"pid {first.process.pid}" in line, second
        # The first one is unaffected.
        assert first.ready()
    assert first.process.returncode is not None


def test_a_second_serve_of_a_sqlite_file_is_refused_before_the_heavy_imports(
    tmp_path: Path,
) -> None:
    import fcntl

    db = tmp_path / "held.db"
    config = write_config(tmp_path / "hipq.yaml", db)
    lock = tmp_path / "held.db.lock"
    with open(lock, "a+") as held:  # what a serving hipq holds
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("pid 4242")
        held.flush()
        done = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-c",
                "import sys; from hipq.commands.main import main; sys.argv[0] = 'hipq'; main()",
                "serve",
                "--config",
                str(config),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert len(errors) == 1 and "already served by pid 4242" in errors[0], done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    for heavy in ("uvicorn", "fastapi", "hipq.service", "hipq.app", "aiosqlite"):
        assert heavy not in imported, heavy


# What a CLI call must not import: the service's stack (FastAPI, SQLAlchemy, the
# drivers, uvicorn), which made every `hipq jobs ...` cost about a second of CPU.
SERVICE_MODULES = ("fastapi", "starlette", "sqlalchemy", "alembic", "aiosqlite", "asyncpg")
SERVICE_MODULES += ("uvicorn", "hipq.service", "hipq.store", "hipq.api")


def imported_by(*args: str, env: dict[str, str] | None = None) -> tuple[Result, set[str]]:
    """Run `hipq ARGS` in a fresh interpreter; its result and every module it imported."""
    script = (
        "import atexit, os, sys\n"
        "listing = os.environ['HIPQ_TEST_MODULES']\n"
        "atexit.register(lambda: open(listing, 'w').write('\\n'.join(sys.modules)))\n"
        "from hipq.commands.main import main\n"
        "sys.argv[0] = 'hipq'\n"
        "main()\n"
    )
    with contextlib.ExitStack() as stack:
        import tempfile

        listing = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "modules"
        done = subprocess.run(
            [sys.executable, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**_env(), **(env or {}), "HIPQ_TEST_MODULES": str(listing)},
            cwd=REPO,
        )
        modules = set(listing.read_text().splitlines())
    return Result(args, done.returncode, done.stdout, done.stderr), modules


def test_the_common_cli_calls_import_only_what_they_use(server: Server, tmp_path: Path) -> None:
    job = hipq("jobs", "add", "ok", "--url", server.url).json()
    config = write_config(tmp_path / "hipq.yaml", tmp_path / "unused.db")
    # The config the client reads (its port) and a database URL it never opens.
    on_port = {"HIPQ_SERVER__PORT": str(server.port)}
    calls = [
        (("--help",), None),
        (("jobs", "--help"), None),
        (("jobs", "show", str(job["id"]), "--url", server.url), None),
        (("jobs", "list", "--config", str(config)), on_port),
        (("queues", "--config", str(config)), on_port),
        (("healthcheck", "--config", str(config)), on_port),
    ]
    for args, env in calls:
        result, modules = imported_by(*args, env=env)
        assert result.code == 0, result
        heavy = sorted(m for m in modules if m.startswith(SERVICE_MODULES))
        assert not heavy, (args, heavy[:5])
    # The check the client call skipped still stands where the database is opened.
    bad = write_config(
        tmp_path / "bad.yaml", tmp_path / "x.db", database_url="sqlite+aiosqlite://:x"
    )
    line = hipq("migrate", "--config", str(bad)).one_error_line()
    assert "database_url" in line, line
    assert hipq("jobs", "show", str(job["id"]), "--config", str(bad), "--url", server.url).code == 0
