"""Throttling end to end: the real loop runs python handlers that measure concurrency."""

from __future__ import annotations

import random

import pytest

from hipq.service import Service
from hipq.store import JobFilter
from tests.support import eventually, make_settings
from tests.throttling import probe

REGIONS = {"east": 40, "north": 30, "west": 30}
PROBE = {"probe": {"transport": {"python": {"handler": "tests.throttling.probe:probe"}}}}


@pytest.fixture(autouse=True)
def _reset_probe() -> None:
    probe.reset()


async def _enqueue(service: Service, jobs: list[dict]) -> None:
    now = service.clock()
    for i in range(0, len(jobs), 1000):
        new = [service.intake.resolve(j, now) for j in jobs[i : i + 1000]]
        await service.store.job_insert_many(new, now)
    service.wake_all()


async def _all_completed(service: Service, total: int) -> bool:
    done = await service.store.job_list(JobFilter(states=("completed",), limit=total))
    return len(done) == total


@pytest.mark.parametrize("lend", [False, True])
async def test_region_shares_hold_at_the_handlers(database_url: str, lend: bool) -> None:
    settings = make_settings(
        database_url,
        job_types=PROBE,
        queues={
            "default": {
                "concurrency": 100,
                "batch_interval": "50ms",
                "throttlers": [{"share": {"label": "region", "shares": REGIONS, "lend": lend}}],
            }
        },
    )
    rng = random.Random(7)
    jobs = [
        {
            "type": "probe",
            "weight": rng.randint(1, 3),
            "labels": {"region": rng.choice(list(REGIONS))},
        }
        for _ in range(3000)
    ]
    service = Service(settings)
    await service.start()
    try:
        await _enqueue(service, jobs)
        await eventually(lambda: _all_completed(service, 3000), timeout=120, interval=0.2)
    finally:
        await service.stop()
    assert len(probe.STARTED) >= 3000
    assert probe.PEAK["*"] <= 100
    if not lend:
        for region, share in REGIONS.items():
            assert 0 < probe.PEAK[f"region={region}"] <= share, (region, dict(probe.PEAK))
    else:
        # Work-conserving: a region may borrow idle capacity, never the total.
        assert max(probe.PEAK[f"region={r}"] for r in REGIONS) > 0


async def test_waiting_reason_and_queue_stats_name_the_throttler(database_url: str) -> None:
    settings = make_settings(
        database_url,
        job_types={"hang": {"transport": {"python": {"handler": "tests.handlers:hang"}}}},
        queues={
            "default": {
                "concurrency": 10,
                "throttlers": [{"share": {"label": "region", "shares": {"east": 40, "west": 60}}}],
            }
        },
    )
    service = Service(settings, run_loops=False)
    await service.start()
    try:
        await _enqueue(service, [{"type": "hang", "labels": {"region": "east"}}] * 6)
        loop = service.loops["default"]
        assert await loop.acquire()
        await loop.run_once()
        held = await service.store.job_list(JobFilter(states=("scheduled",)))
        assert len(held) == 2
        assert {j.waiting_reason for j in held} == {"share region=east 4/4 in use"}
        counts = await service.store.queue_counts("default", service.clock())
        assert counts.stats["held_by"] == {"share": 2}
        assert counts.stats["in_use_by"] == {"region": {"east": 4}}
    finally:
        await service.stop()


async def test_example_plugin_caps_each_tenant(database_url: str) -> None:
    """The how-to's plugin, installed as a package, found through its entry point."""
    settings = make_settings(
        database_url,
        job_types=PROBE,
        queues={
            "default": {
                "concurrency": 20,
                "batch_interval": "50ms",
                "throttlers": [{"tenant_cap": {"label": "tenant", "percent": 20}}],
            }
        },
    )
    service = Service(settings)
    await service.start()
    try:
        jobs = [{"type": "probe", "labels": {"tenant": f"t{i % 5}"}} for i in range(300)]
        await _enqueue(service, jobs)
        await eventually(lambda: _all_completed(service, 300), timeout=60, interval=0.1)
    finally:
        await service.stop()
    for tenant in range(5):
        assert 0 < probe.PEAK[f"tenant=t{tenant}"] <= 4


async def test_critical_jobs_pass_a_full_share(database_url: str) -> None:
    settings = make_settings(
        database_url,
        job_types={"hang": {"transport": {"python": {"handler": "tests.handlers:hang"}}}},
        queues={
            "default": {
                "concurrency": 10,
                "throttlers": [
                    {
                        "share": {
                            "label": "region",
                            "shares": {"east": 50, "west": 50},
                            "let_critical_through": True,
                        }
                    }
                ],
            }
        },
    )
    service = Service(settings, run_loops=False)
    await service.start()
    try:
        await _enqueue(service, [{"type": "hang", "labels": {"region": "east"}}] * 8)
        loop = service.loops["default"]
        assert await loop.acquire()
        await loop.run_once()
        await _enqueue(service, [{"type": "hang", "labels": {"region": "east"}, "critical": True}])
        await loop.run_once()
        running = await service.store.job_list(JobFilter(states=("running",)))
        assert len(running) == 6
        assert any(j.critical for j in running)
    finally:
        await service.stop()


@pytest.mark.postgres
async def test_limits_hold_across_two_processes(postgres_url_fresh: str) -> None:
    """Two services on one PostgreSQL: one owns the queue; when it dies the other takes
    over, and the share limits measured at the handlers hold throughout."""
    settings = make_settings(
        postgres_url_fresh,
        job_types=PROBE,
        lease_ttl="1s",
        queues={
            "default": {
                "concurrency": 30,
                "batch_interval": "50ms",
                "throttlers": [{"share": {"label": "region", "shares": {"east": 50, "west": 50}}}],
            }
        },
    )
    first, second = Service(settings), Service(settings)
    await first.start()
    await second.start()
    try:
        jobs = [{"type": "probe", "labels": {"region": r}} for r in ("east", "west") * 600]
        await _enqueue(second, jobs)  # posted to the process that does not own the queue
        await eventually(lambda: len(probe.STARTED) > 300, timeout=60)
        owner = first if first.loops["default"].token is not None else second
        survivor = second if owner is first else first
        await owner.stop()  # stop() releases the lease: the survivor takes over at once
        await eventually(lambda: _all_completed(survivor, 1200), timeout=60, interval=0.2)
        assert survivor.loops["default"].token is not None
    finally:
        for service in (first, second):
            if service.started:
                await service.stop()
    assert probe.PEAK["region=east"] <= 15 and probe.PEAK["region=west"] <= 15


async def test_a_share_takes_its_capacity_back_when_the_queue_has_a_concurrency(
    database_url: str,
) -> None:
    """Lending with the queue's concurrency set: freed capacity goes to the owner that
    waits below its quota, not to an older borrower."""
    settings = make_settings(
        database_url,
        job_types={"hang": {"transport": {"python": {"handler": "tests.handlers:hang"}}}},
        queues={
            "default": {
                "concurrency": 10,
                "throttlers": [
                    {"share": {"label": "region", "shares": {"east": 50, "west": 50}, "lend": True}}
                ],
            }
        },
    )
    service = Service(settings, run_loops=False)
    await service.start()
    try:
        loop = service.loops["default"]
        assert await loop.acquire()
        await _enqueue(service, [{"type": "hang", "labels": {"region": "east"}}] * 12)
        await loop.run_once()  # east borrows west's idle half: 10 running
        running = await service.store.job_list(JobFilter(states=("running",)))
        assert len(running) == 10
        await _enqueue(service, [{"type": "hang", "labels": {"region": "west"}}] * 2)
        for job in running[:2]:
            await service.store.job_cancel(job.id, service.clock())
        await loop.run_once()
        now_running = await service.store.job_list(JobFilter(states=("running",)))
        regions = sorted(j.labels["region"] for j in now_running)
        assert regions.count("west") == 2 and len(regions) == 10
    finally:
        await service.stop()
