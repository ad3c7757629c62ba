"""Big request bodies against `hipq serve`: does /healthz still answer while one is
parsed, and how much memory does the server take? Also the cost of parsing a small
job body (the single-job POST).

Loopback only, bounded: one server on a temporary SQLite file, a few big POSTs.

    python benchmarks/bench_big_body.py [--mib 30] [--posts 1] [--digits 13]

Run it with ``PYTHONPATH`` naming another checkout to measure that one instead.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

import httpx
import orjson

SMALL = {
    "type": "echo",
    "payload": {"order_id": "A-1742", "amount": 1299, "currency": "EUR", "lines": [1, 2, 3]},
    "labels": {"tenant": "acme", "region": "eu"},
    "priority": 5,
    "correlation_key": "order-A-1742",
}


def small_body_parse() -> None:
    raw = orjson.dumps(SMALL)
    n = 200_000
    print(f"small body: {len(raw)} bytes, best of 5 x {n}")
    for name, parse in _parsers().items():
        best = min(timeit.repeat(lambda p=parse: p(raw), number=n, repeat=5))  # type: ignore[misc]
        print(f"  {name:<24} {best / n * 1e6:6.2f} us")


def _parsers() -> dict[str, object]:
    parsers: dict[str, object] = {"orjson.loads": orjson.loads, "json.loads": json.loads}
    try:
        from hipq.api.json_body import loads
    except ImportError:  # a checkout before the API's own parser
        return parsers
    parsers["hipq.api.json_body.loads"] = loads
    return parsers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def big_bodies(mib: int, posts: int, digits: int) -> None:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "hipq.yaml"
        config.write_text(
            f"database_url: sqlite+aiosqlite:///{tmp}/hipq.db\n"
            "migrate_on_start: true\nlog_level: warning\n"
            f"server: {{host: 127.0.0.1, port: {port}, max_body_bytes: {64 * 2**20}}}\n"
            "queues: {default: {}}\n"
            "job_types: {echo: {transport: {python: {handler: hipq.handlers:echo}}}}\n"
        )
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from hipq.commands.main import app; app()",
                "serve",
                "-c",
                str(config),
            ],
            # A HIPQ_DATABASE_URL in the shell must not point this at a real database.
            env={k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")},
            cwd=tmp,  # `python -c` imports from its working directory first
        )
        try:
            _measure(f"http://127.0.0.1:{port}", server.pid, mib, posts, digits)
        finally:
            server.terminate()
            server.wait(timeout=30)


def _measure(base: str, pid: int, mib: int, posts: int, digits: int) -> None:
    with httpx.Client(base_url=base, timeout=120) as client:
        for _ in range(200):
            try:
                client.get("/healthz")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        # Each number takes its digits and a comma.
        n = mib * 2**20 // (digits + 1)
        first = 10 ** (digits - 1)
        # Scheduled far ahead: the measure is the request, not running the job.
        job = {"type": "echo", "run_at": "2100-01-01T00:00:00Z"}
        body = orjson.dumps({**job, "payload": {"xs": [first + i % first for i in range(n)]}})
        print(f"big body: {len(body) / 2**20:.1f} MiB of {n} numbers, {posts} at once; ", end="")
        print("idle RSS ", end="")
        print(f"{peak_rss_mib(pid):.0f} MiB")
        # The big POSTs come from curl processes: a client thread here would share this
        # process's GIL with the /healthz probe and stall it, not the server.
        posted = Path(tempfile.mkdtemp()) / "body.json"
        posted.write_bytes(body)
        curls = [
            subprocess.Popen(
                ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{time_total}",
                 "-H", "content-type: application/json", "--data-binary", f"@{posted}",
                 f"{base}/v1/jobs"],
                stdout=subprocess.PIPE, text=True,
            )
            for _ in range(posts)
        ]  # fmt: skip
        worst = 0.0
        while any(c.poll() is None for c in curls):
            start = time.monotonic()
            client.get("/healthz")
            worst = max(worst, time.monotonic() - start)
            time.sleep(0.05)
        answers = [c.communicate()[0] for c in curls]
        posted.unlink()
        print(f"  POST answers (status, seconds): {answers}")
        print(f"  /healthz worst latency meanwhile: {worst * 1000:.0f} ms")
        print(f"  server peak RSS: {peak_rss_mib(pid):.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=30, help="size of each big body")
    parser.add_argument("--posts", type=int, default=1, help="big bodies posted at once")
    parser.add_argument("--digits", type=int, default=13, help="digits of each number")
    args = parser.parse_args()
    small_body_parse()
    big_bodies(args.mib, args.posts, args.digits)


if __name__ == "__main__":
    main()
