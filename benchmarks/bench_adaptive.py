"""Adaptive throttling against a peer with a hidden capacity (prints figures, asserts nothing).

    python benchmarks/bench_adaptive.py --capacity 20 --jobs 600

A loopback HTTP peer serves at most ``capacity`` requests per second (sliding
window) and answers 429 above it. An in-process hipq (SQLite in a temporary
directory) sends ``jobs`` HTTP jobs to it (``callback: false``, retried after 50 ms
on a 429), once under ``adaptive`` starting at four times the capacity and once
under a fixed ``rate`` of the same value. Printed per run: the requests, the 429s
(overall and after the first quarter of the run), the peer's served rate per second
over the run, and the adaptive rate hipq ended with.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hipq.service import Service
from hipq.store import JobFilter
from tests.long_waits.capacity_peer import CapacityPeer
from tests.long_waits.entry_point import adaptive_registered
from tests.peers import serve_app
from tests.support import make_settings


async def run(throttler: dict[str, Any], capacity: int, jobs: int) -> None:
    peer = CapacityPeer(capacity, 1.0)
    with tempfile.TemporaryDirectory() as tmp:
        async with serve_app(peer.app) as base:
            work = {
                "retry": {"strategy": "fixed", "delay": "50ms", "max_attempts": 1000},
                "transport": {"http": {"url": f"{base}/work", "callback": False}},
            }
            settings = make_settings(
                f"sqlite+aiosqlite:///{tmp}/hipq.db",
                job_types={"work": work},
                queues={"default": {"batch_interval": "20ms", "throttlers": [throttler]}},
            )
            service = Service(settings)
            await service.start()
            try:
                now = service.clock()
                new = [service.intake.resolve({"type": "work"}, now) for _ in range(jobs)]
                await service.store.job_insert_many(new, now)
                service.wake_all()
                started = time.monotonic()
                limit = started + 30 + 4 * jobs / capacity  # bounded
                done = 0
                while done < jobs and time.monotonic() < limit:
                    await asyncio.sleep(0.25)
                    filt = JobFilter(states=("completed",), limit=jobs)
                    done = len(await service.store.job_list(filt))
                took = time.monotonic() - started
                learned = service.loops["default"].stages[-1].state
                state = dict(learned()) if learned is not None else {}
            finally:
                await service.stop()
    name = next(iter(throttler))
    late, late_total = peer.refused_after(0.25)
    print(f"{name:9} {throttler[name]}")
    print(
        f"  {done}/{jobs} completed in {took:.1f}s = {done / took:.1f} jobs/s "
        f"(capacity {capacity}/s); {len(peer.answers)} requests, {peer.refused} x 429 "
        f"({100 * peer.refused / max(1, len(peer.answers)):.1f} %), after the first quarter "
        f"{late}/{late_total} ({100 * late / max(1, late_total):.1f} %)"
    )
    t0 = peer.answers[0][0] if peer.answers else 0.0
    per_second: dict[int, int] = {}
    for at, status in peer.answers:
        if status == 200:
            per_second[int(at - t0)] = per_second.get(int(at - t0), 0) + 1
    print("  served per second:", " ".join(str(per_second.get(i, 0)) for i in range(int(took))))
    if state:
        print("  adaptive state at the end:", state)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=600)
    args = parser.parse_args()
    start = 4 * args.capacity
    with adaptive_registered():
        await run({"adaptive": {"initial": start, "per": "1s"}}, args.capacity, args.jobs)
        await run({"rate": {"limit": start, "per": "1s"}}, args.capacity, args.jobs)


if __name__ == "__main__":
    asyncio.run(main())
