"""CPU per request of ``GET /v1/jobs/{id}?wait=``, without the network (prints figures).

    python benchmarks/bench_long_poll_cpu.py --engine sqlite --requests 1000

The Service's API (``create_app``) behind uvicorn's own ``RequestResponseCycle`` and
``hipq serve``'s one-send transport (``hipq.api.one_send``), over a transport that
writes nowhere: no socket, no client. The waiters' wait is replaced by a future per
request, all set at once with one job's view (its body about 1 KB). Printed, per
request, the event loop thread's CPU time of:

- intake: from the request's start to its wait (the middleware, FastAPI, the route);
- answer: from its future set to its response written and its request done (the
  route's answer, the sends through the middleware, uvicorn's response).

What it leaves out, ``bench_long_polls.py`` has: the kernel's loopback send of each
answer, the waiters' reads, the clients.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from engines import add_engine_options, chosen_engines
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from hipq.api.one_send import _HeadWithBody
from hipq.app import create_app
from hipq.commands.bench import fresh_database
from hipq.config import load_settings
from hipq.process import runtime
from hipq.service import Service


async def held(job: Any) -> dict[str, Any]:
    return {"ok": True}


class Nowhere(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, data: Any) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return False


async def measure(url: str, requests: int, rounds: int) -> tuple[list[float], list[float]]:
    settings = load_settings(
        None,
        database_url=url,
        log_level="warning",
        job_types={"held": {"transport": {"python": {"handler": "__main__:held"}}}},
    )
    service = Service(settings)
    await service.start()
    try:
        app = create_app(service, manage_service=False)
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            posted = await http.post("/v1/jobs", json={"type": "held", "payload": {"x": "x" * 900}})
            job_id = posted.json()["id"]
        view = await service.store.job_view(job_id)
        futures: list[asyncio.Future[Any]] = []
        all_waiting = asyncio.Event()

        async def wait(job_id: int, seconds: float) -> Any:
            futures.append(asyncio.get_running_loop().create_future())
            if len(futures) == requests:
                all_waiting.set()
            return await futures[-1]

        service.waiters.wait = wait  # type: ignore[method-assign]
        runtime.settle_after_start()  # as hipq serve does once started
        loop = asyncio.get_running_loop()
        logger = logging.getLogger("bench")
        intake, answer = [], []
        for _ in range(rounds):
            futures.clear()
            all_waiting.clear()
            tasks, outs = [], []
            start = time.thread_time()
            for i in range(requests):
                out = Nowhere()
                path = f"/v1/jobs/{job_id}"
                scope: Any = {
                    "type": "http",
                    "asgi": {"version": "3.0", "spec_version": "2.3"},
                    "http_version": "1.1",
                    "server": ("127.0.0.1", 8000),
                    "client": ("127.0.0.1", 10000 + i),
                    "scheme": "http",
                    "root_path": "",
                    "headers": [(b"host", b"127.0.0.1")],
                    "state": {},
                    "method": "GET",
                    "path": path,
                    "raw_path": path.encode(),
                    "query_string": b"wait=10s",
                }
                cycle = RequestResponseCycle(
                    scope=scope,
                    transport=out,
                    flow=FlowControl(out),
                    logger=logger,
                    access_logger=logger,
                    access_log=False,
                    default_headers=[(b"server", b"uvicorn")],
                    message_event=asyncio.Event(),
                    expect_100_continue=False,
                    keep_alive=True,
                    on_response=lambda: None,
                )
                cycle.more_body = False
                cycle.transport = _HeadWithBody(out, cycle, loop)  # type: ignore[assignment]
                outs.append(out)
                tasks.append(loop.create_task(cycle.run_asgi(app)))
            await all_waiting.wait()
            waiting = time.thread_time()
            for future in futures:
                future.set_result(view)
            await asyncio.gather(*tasks)
            await asyncio.sleep(0)  # the held heads' flushes
            done = time.thread_time()
            assert all(out.writes == 1 for out in outs), "an answer was not written"
            intake.append((waiting - start) / requests * 1e6)
            answer.append((done - waiting) / requests * 1e6)
        return intake, answer
    finally:
        await service.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_engine_options(parser)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    engines, opts = chosen_engines(args)
    with tempfile.TemporaryDirectory(prefix="hipq-bench-long-poll-cpu-") as tmp:
        for engine in engines:
            async with fresh_database(engine, opts, Path(tmp), f"long-poll-cpu-{engine}") as url:
                intake, answer = await measure(url, args.requests, args.rounds)
            print(
                f"  {engine:<8} {args.requests:,} requests: CPU per request (median / min of "
                f"{args.rounds} rounds): intake {statistics.median(intake):5.1f} / "
                f"{min(intake):5.1f} µs, answer {statistics.median(answer):5.1f} / "
                f"{min(answer):5.1f} µs",
                flush=True,
            )


if __name__ == "__main__":
    asyncio.run(main())
