"""What one ``hipq`` command costs in CPU, almost all of it imports: the common calls,
each run in a fresh interpreter as an operator's shell runs them, against a
``hipq serve`` on SQLite in a temporary folder (127.0.0.1 only).

    python benchmarks/bench_cli.py [--runs 10]

Prints the CPU seconds (user + system) per call, averaged over ``--runs`` calls, the
load average at the start (the figures grow with it), and the service's modules a
call imported (there should be none: ``python -X importtime -c ...`` tells where
the rest goes).
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parent.parent
SERVICE_MODULES = ("fastapi", "starlette", "sqlalchemy", "uvicorn", "hipq.service", "hipq.api")
# Runs the command as the `hipq` script does, then lists what it imported.
SCRIPT = (
    "import atexit, os, sys\n"
    "listing = os.environ['BENCH_MODULES']\n"
    "atexit.register(lambda: open(listing, 'w').write('\\n'.join(sys.modules)))\n"
    "from hipq.commands.main import main\n"
    "sys.argv[0] = 'hipq'\n"
    "main()\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_per_call(args: list[str], runs: int, env: dict[str, str]) -> tuple[float, list[str]]:
    """CPU seconds per call of ``hipq ARGS``, and the service modules it imported."""
    listing = Path(env["BENCH_MODULES"])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, env=env
        )
        if done.returncode != 0:
            raise SystemExit(f"hipq {' '.join(args)} failed: {done.stderr.strip()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = [m for m in listing.read_text().splitlines() if m.startswith(SERVICE_MODULES)]
    heavy = sorted({next(s for s in SERVICE_MODULES if m.startswith(s)) for m in found})
    return cpu / runs, heavy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="calls of each command")
    runs = parser.parse_args().runs
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        config = Path(tmp) / "hipq.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "database_url": f"sqlite+aiosqlite:///{Path(tmp) / 'hipq.db'}",
                    "migrate_on_start": True,
                    "log_level": "warning",
                    "server": {"port": port},
                    "job_types": {
                        "noop": {"transport": {"python": {"handler": "hipq.handlers:noop"}}}
                    },
                }
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
        env.update(
            PYTHONPATH=str(REPO), HIPQ_CONFIG=str(config), BENCH_MODULES=str(Path(tmp) / "mods")
        )
        server = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, "serve"], env=env, stderr=subprocess.DEVNULL
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("hipq serve did not become ready")
                time.sleep(0.2)
            job = httpx.post(f"{url}/v1/jobs", json={"type": "noop"}, timeout=10).json()["id"]
            calls = [
                ["--help"],
                ["jobs", "add", "--help"],
                ["jobs", "list"],
                ["jobs", "show", str(job), "--url", url],
                ["queues"],
                ["healthcheck"],
            ]
            print(f"{'command':<44} {'CPU s/call':>10}  service modules imported")
            for args in calls:
                cpu, heavy = cpu_per_call(args, runs, env)
                shown = " ".join(a if a != url else "URL" for a in args)
                print(f"hipq {shown:<39} {cpu:>10.3f}  {', '.join(heavy) or 'none'}")
            serve_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
            # The refusal of a second serve of the same SQLite file.
            start = serve_cpu.ru_utime + serve_cpu.ru_stime
            for _ in range(runs):
                subprocess.run(
                    [sys.executable, "-c", SCRIPT, "serve", "--port", str(free_port())],
                    env=env,
                    capture_output=True,
                )
            end = resource.getrusage(resource.RUSAGE_CHILDREN)
            refused = (end.ru_utime + end.ru_stime - start) / runs
            print(f"{'hipq serve (refused: the file is served)':<44} {refused:>10.3f}")
        finally:
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
