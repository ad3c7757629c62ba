"""Adaptive throttling end to end: the real loop sends HTTP jobs to a loopback peer
that refuses (429) whatever goes over its hidden capacity."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hipq.store import JobFilter
from tests.external.test_http_callbacks import running_hipq
from tests.long_waits.capacity_peer import CapacityPeer
from tests.peers import free_port, serve_app
from tests.support import eventually, make_settings

CAPACITY = 6  # requests per PER the peer serves; hipq is not told
PER = "500ms"
JOBS = 120


def settings_for(database_url: str, peer: str, throttler: dict[str, Any]) -> Any:
    work = {
        "retry": {"strategy": "fixed", "delay": "50ms", "max_attempts": 100},
        "transport": {"http": {"url": f"{peer}/work", "callback": False, "timeout": "5s"}},
    }
    return make_settings(
        database_url,
        job_types={"work": work},
        server={"host": "127.0.0.1", "port": free_port()},
        queues={"default": {"batch_interval": "20ms", "throttlers": [throttler]}},
    )


async def _completed(service: Any) -> int:
    return len(await service.store.job_list(JobFilter(states=("completed",), limit=10 * JOBS)))


async def _run(database_url: str, throttler: dict[str, Any]) -> tuple[CapacityPeer, dict, str]:
    peer = CapacityPeer(CAPACITY, 0.5)
    async with serve_app(peer.app) as base:
        async with running_hipq(settings_for(database_url, base, throttler)) as (service, api):
            before = await _completed(service)  # the same database serves two runs
            jobs = [{"type": "work", "payload": {"n": i}} for i in range(JOBS)]
            response = await api.post("/v1/jobs/batch", json={"jobs": jobs})
            assert response.status_code == 201, response.text

            async def all_done() -> bool:
                return await _completed(service) == before + JOBS

            await eventually(all_done, timeout=120, interval=0.2)
            queue = (await api.get("/v1/queues/default")).json()
            metrics = (await api.get("/metrics")).text
    return peer, queue, metrics


async def test_the_rate_settles_near_the_hidden_capacity_with_few_429s_and_a_fixed_rate_does_not(
    database_url: str,
) -> None:
    """The adaptive rate learns the peer's hidden capacity; then the contrast that shows
    what it buys: a fixed rate of the same starting value keeps hitting the wall. (One
    test: the contrast needs the adaptive run, and each run takes seconds of real time.)"""
    adaptive, queue, metrics = await _run(database_url, {"adaptive": {"initial": 24, "per": PER}})
    assert adaptive.served == JOBS
    # It starts at four times the capacity, so the first bursts are refused; once it has
    # learned, few requests are.
    assert adaptive.refused > 0
    late_refused, late_total = adaptive.refused_after(0.5)
    assert late_refused <= late_total * 0.25, adaptive.answers
    state = queue["throttler_state"]["adaptive"]["*"]
    assert CAPACITY * 0.4 <= state["rate"] <= CAPACITY * 1.5, state
    assert state["overloads"] >= 1
    rates = [
        s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "hipq_throttler_rate"
    ]
    assert len(rates) == 1 and CAPACITY * 0.4 <= rates[0] <= CAPACITY * 1.5

    fixed, _, _ = await _run(database_url, {"rate": {"limit": 24, "per": PER}})
    assert fixed.served == JOBS
    assert fixed.refused > 2 * adaptive.refused, (fixed.refused, adaptive.refused)
