"""How late ``GET /v1/jobs/{id}?wait=`` answers (prints figures, asserts nothing).

    python benchmarks/bench_long_polls.py --engine both --waiters 1 300 1000

Per engine and number of waiters, a ``hipq serve``-like Service (its loops running)
behind uvicorn on 127.0.0.1 with ``hipq serve``'s own server settings, and one request
per job from the clients of ``long_poll_clients.py`` in another process, over loopback
(as a user's clients are); ``--client asgi`` sends them through the ASGI app in the
server's own process and event loop instead (no network; the earlier figures):

- job end: every job is held by a python handler; the requests wait ``--wait``
  seconds, the handlers are released ``--hold`` seconds after every request waits,
  and each answer's lateness is measured from the moment its job settled (the core's
  ``job_settled`` event, after the commit) to the moment the client has the answer
  (below zero for an answer that a check read between the commit and the event);
- deadline: every job is scheduled far ahead, so none finishes; each answer's
  lateness is measured from the moment its request was sent plus its wait (``asgi``:
  from the moment all requests were started).

Printed: median, p99 and max lateness in milliseconds, and the CPU time the server's
process spent meanwhile (job end: from the release to the last answer, the jobs'
settling included; deadline: from the first request to the last answer). ``--floor``
also measures uvicorn alone with the same clients: a bare ASGI app whose requests
wait on one event (then each answers a prebuilt body of a job's size) or sleep the
wait: what writing that many answers costs on this machine whatever the server does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import uvicorn
from engines import add_engine_options, chosen_engines

from hipq.app import create_app
from hipq.commands.bench import fresh_database
from hipq.commands.main import listen, server_config
from hipq.config import load_settings
from hipq.process import runtime
from hipq.service import Service

RELEASE = asyncio.Event()
CLIENTS = Path(__file__).resolve().parent / "long_poll_clients.py"


async def held(job: Any) -> dict[str, Any]:
    """The benchmark's handler: in flight until the script releases every job."""
    await RELEASE.wait()
    return {"ok": True}


async def until(check: Any, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError("the benchmark did not reach its state in time")
        await asyncio.sleep(0.02)


def figures(lateness: list[float]) -> str:
    ms = sorted(x * 1000 for x in lateness)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"median {statistics.median(ms):7.1f}  p99 {p99:7.1f}  max {ms[-1]:7.1f} ms"


# A round: the job ids to wait for; what comes back per id: (sent, answered, state).
Answers = list[tuple[float, float, Any]]
Round = Callable[[list[int], Callable[[], Awaitable[None]]], Awaitable[Answers]]


class Clients:
    """The client process: one round of requests at a time."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc, self.port = proc, port

    async def requests(
        self, paths: list[str], meanwhile: Callable[[], Awaitable[None]]
    ) -> list[tuple[float, float, Any]]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"port": self.port, "paths": paths}).encode() + b"\n")
        await self.proc.stdin.drain()
        await meanwhile()
        done = json.loads(await self.proc.stdout.readline())
        return list(zip(done["sent"], done["got"], done["states"], strict=True))


@contextlib.asynccontextmanager
async def clients_process(port: int) -> AsyncIterator[Clients]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CLIENTS), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    try:
        yield Clients(proc, port)
    finally:
        assert proc.stdin
        proc.stdin.close()
        await proc.wait()


@contextlib.asynccontextmanager
async def uvicorn_serving(config: uvicorn.Config) -> AsyncIterator[int]:
    """``config``'s app served on 127.0.0.1 (a free port); yields the port."""
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await until(lambda: server.started or serving.done())
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        await serving


async def measure(url: str, waiters: int, wait: float, hold: float, client: str) -> tuple[str, str]:
    RELEASE.clear()
    settings = load_settings(
        None,
        database_url=url,
        log_level="warning",
        queues={"default": {"batch_size": max(waiters, 10), "batch_interval": "1s"}},
        job_types={"held": {"transport": {"python": {"handler": "__main__:held"}}}},
        # Every waiter holds a connection (uvicorn answers 503 beyond this many).
        server={"host": "127.0.0.1", "port": 0, "max_connections": waiters + 100},
    )
    service = Service(settings)
    settled: dict[int, float] = {}

    def on_event(name: str, fields: dict[str, Any]) -> None:
        if name == "job_settled":
            settled.setdefault(int(fields["job_id"]), time.perf_counter())

    service.events.subscribe(on_event)
    await service.start()
    app = create_app(service, manage_service=False)
    runtime.settle_after_start()  # as hipq serve does once started
    try:
        async with contextlib.AsyncExitStack() as stack:
            if client == "asgi":
                base_url, transport = "http://127.0.0.1", httpx.ASGITransport(app)
            else:
                config = server_config(app, settings)
                port = await stack.enter_async_context(uvicorn_serving(config))
                base_url, transport = f"http://127.0.0.1:{port}", None
                clients = await stack.enter_async_context(clients_process(port))
            http = await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url=base_url, timeout=wait + 60)
            )

            async def in_process(ids: list[int], meanwhile: Callable[[], Awaitable[None]]) -> Any:
                async def answered(job_id: int) -> tuple[float, float, Any]:
                    got = await http.get(f"/v1/jobs/{job_id}", params={"wait": f"{wait}s"})
                    return start, time.perf_counter(), got.json()["state"]

                start = time.perf_counter()
                tasks = [asyncio.create_task(answered(i)) for i in ids]
                await meanwhile()
                return await asyncio.gather(*tasks)

            async def separate(ids: list[int], meanwhile: Callable[[], Awaitable[None]]) -> Any:
                paths = [f"/v1/jobs/{i}?wait={wait}s" for i in ids]
                return await clients.requests(paths, meanwhile)

            requests: Round = in_process if client == "asgi" else separate

            # Job end: the handlers hold every job until released.
            posted = await http.post("/v1/jobs/batch", json={"jobs": [{"type": "held"}] * waiters})
            ids = [j["id"] for j in posted.json()["jobs"]]
            python = next(iter(service.transports.values()))
            await until(lambda: python.busy >= waiters)

            async def release() -> None:
                await until(lambda: service.waiters.waiting >= waiters)
                await asyncio.sleep(hold)
                cpu[0] = time.process_time()
                RELEASE.set()

            cpu = [0.0]
            done = await requests(ids, release)
            end_cpu = time.process_time() - cpu[0]
            stale = [state for _, _, state in done if state != "completed"]
            assert not stale, f"stale answers: {stale[:5]}"
            # A check may read a job finished between the settle's commit and its event
            # (the periodic recheck): that answer counts as early, below zero.
            await until(lambda: all(i in settled for i in ids))
            ended = [got - settled[i] for i, (_, got, _) in zip(ids, done, strict=True)]

            # Deadline: jobs that will not finish within the wait.
            far = [{"type": "held", "run_at": "2099-01-01T00:00:00Z"}] * waiters
            posted = await http.post("/v1/jobs/batch", json={"jobs": far})
            ids = [j["id"] for j in posted.json()["jobs"]]

            async def nothing() -> None:
                return None

            cpu[0] = time.process_time()
            done = await requests(ids, nothing)
            deadline_cpu = time.process_time() - cpu[0]
            late = [got - (sent + wait) for sent, got, _ in done]
    finally:
        RELEASE.set()
        await service.stop()
    return (
        f"{figures(ended)}  server CPU {end_cpu * 1000:5.0f} ms",
        f"{figures(late)}  server CPU {deadline_cpu * 1000:5.0f} ms",
    )


# -- the floor: uvicorn alone ----------------------------------------------------------

BODY = json.dumps({"id": 1, "state": "completed", "pad": "x" * 1100}).encode()


async def floor(waiters: int, wait: float, hold: float) -> tuple[str, str]:
    """Lateness of a bare ASGI app's answers, from one event set (all answer) and from
    each request's sleep of ``wait`` seconds: uvicorn's and the clients' cost alone."""
    event = asyncio.Event()
    arrived = 0

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal arrived
        if scope["type"] != "http":
            return
        arrived += 1
        if "wait" in scope["query_string"].decode():
            await asyncio.sleep(wait)
        else:
            await event.wait()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(BODY))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": BODY})

    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", http="httptools"
    )
    set_at = 0.0

    async def release() -> None:
        nonlocal set_at
        await until(lambda: arrived >= waiters)
        await asyncio.sleep(hold)
        set_at = time.perf_counter()
        event.set()

    async def nothing() -> None:
        return None

    async with uvicorn_serving(config) as port, clients_process(port) as clients:
        done = await clients.requests(["/event"] * waiters, release)
        ended = [got - set_at for _, got, _ in done]
        done = await clients.requests(["/sleep?wait"] * waiters, nothing)
        late = [got - (sent + wait) for sent, got, _ in done]
    return figures(ended), figures(late)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--waiters", type=int, nargs="+", default=[1, 300, 1000])
    parser.add_argument("--wait", type=float, default=10.0, help="seconds each request waits")
    parser.add_argument("--hold", type=float, default=3.0, help="seconds until jobs end")
    parser.add_argument(
        "--client",
        choices=["process", "asgi"],
        default="process",
        help="clients in another process over loopback, or through the ASGI app in-process",
    )
    parser.add_argument("--floor", action="store_true", help="also measure uvicorn alone")
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    with tempfile.TemporaryDirectory(prefix="hipq-bench-long-polls-") as tmp:
        if args.floor:
            for n in args.waiters:
                ended, late = await floor(n, args.wait, args.hold)
                print(f"  {'uvicorn':<8} {n:>5,} waiters  after event:    {ended}", flush=True)
                print(f"  {'alone':<8} {'':>13}  after deadline: {late}", flush=True)
        for engine in engines:
            for n in args.waiters:
                name = f"long-polls-{engine}-{n}"
                async with fresh_database(engine, opts, Path(tmp), name) as url:
                    ended, late = await measure(url, n, args.wait, args.hold, args.client)
                print(f"  {engine:<8} {n:>5,} waiters  after job end: {ended}", flush=True)
                print(f"  {'':<8} {'':>13}  after deadline: {late}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
