"""Metrics an operator's charts read: the queue delay, attempt verdicts, and the
shipped Grafana dashboard, every metric of which must exist in /metrics."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import open_api
from tests.api.test_queues_api import metric

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "hipq.json"
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
}


async def test_queue_delay_is_run_at_to_claim_and_attempts_count_verdicts(
    database_url: str,
) -> None:
    async with open_api(database_url) as api:
        due = api.clock() - timedelta(seconds=30)
        await api.post_job(type="ok", run_at=due.isoformat())
        await api.post_job(type="fail", run_at=api.clock().isoformat())
        api.clock.advance(2)
        await api.tick()
        text = (await api.client.get("/metrics")).text
    assert metric(text, "hipq_queue_delay_seconds_count", queue="default") == 2
    assert metric(text, "hipq_queue_delay_seconds_sum", queue="default") == 32 + 2
    # 32 s and 2 s late: the 2.5 s and 30 s buckets hold one, the 60 s bucket both.
    assert metric(text, "hipq_queue_delay_seconds_bucket", queue="default", le="2.5") == 1
    assert metric(text, "hipq_queue_delay_seconds_bucket", queue="default", le="30.0") == 1
    assert metric(text, "hipq_queue_delay_seconds_bucket", queue="default", le="60.0") == 2
    labels = {"queue": "default", "type": "fail", "verdict": "retried", "error_kind": "error"}
    assert metric(text, "hipq_attempts_total", **labels) == 1
    done = {"queue": "default", "type": "ok", "verdict": "completed", "error_kind": ""}
    assert metric(text, "hipq_attempts_total", **done) == 1


def _exprs(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


async def test_every_metric_the_grafana_dashboard_queries_exists(database_url: str) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    async with open_api(database_url) as api:
        text = (await api.client.get("/metrics")).text
    exposed = {
        family.name + suffix
        for family in text_string_to_metric_families(text)
        for suffix in SUFFIXES.get(family.type, ("",))
    }
    queried = {name for e in _exprs(dashboard) for name in re.findall(r"\bhipq_[a-z_]+", e)}
    assert len(queried) >= 12  # the dashboard reads them, not a handful
    assert queried <= exposed, sorted(queried - exposed)
    # Charts the dashboard promises: throughput, failure rate, queue delay.
    titles = " | ".join(p["title"] for p in dashboard["panels"])
    for chart in ("Throughput", "Failure rate", "Queue delay"):
        assert chart in titles


def _series(text: str, name: str, **labels: str) -> float | None:
    """The sample's value, None when /metrics has no such series (an alert's "no data")."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return None


async def test_counters_have_series_at_zero_before_any_event(database_url: str) -> None:
    async with open_api(database_url) as api:
        text = (await api.client.get("/metrics")).text
    for name, labels in [
        ("hipq_jobs_admitted_total", {"queue": "default"}),
        ("hipq_jobs_settled_total", {"queue": "bulk", "state": "failed"}),
        ("hipq_tick_failures_total", {"queue": "default"}),
        ("hipq_attempts_total", {"queue": "default", "type": "fail", "verdict": "failed"}),
        ("hipq_attempts_total", {"queue": "bulk", "type": "typed", "verdict": "given_up"}),
        ("hipq_responses_settled_total", {"status": "expired"}),
        ("hipq_jobs_pruned_total", {"state": "completed"}),
        ("hipq_queue_delay_seconds_count", {"queue": "bulk"}),
        ("hipq_responses_stored_total", {"source": "webhook"}),
    ]:
        assert _series(text, name, **labels) == 0, (name, labels)
    # The process's own figures, as a default registry has them.
    assert (_series(text, "process_cpu_seconds_total") or 0) > 0
    assert (_series(text, "process_resident_memory_bytes") or 0) > 0
    assert _series(text, "python_info") == 1


async def test_backlog_gauges_rise_with_posted_jobs_and_fall_after_they_run(
    database_url: str,
) -> None:
    async with open_api(database_url) as api:
        gauges = api.service.queue_gauges
        assert await api.loop("default").acquire()  # this process owns default, not bulk

        async def scrape() -> str:
            await gauges.run_once()  # what the process does every metrics_interval
            return (await api.client.get("/metrics")).text

        text = await scrape()
        assert _series(text, "hipq_queue_backlog", queue="default") == 0
        assert _series(text, "hipq_queue_backlog", queue="bulk") is None  # not its queue
        for _ in range(3):
            await api.post_job(type="ok")
        await api.post_job(type="fail", run_at=(api.clock() + timedelta(hours=1)).isoformat())
        text = await scrape()
        assert _series(text, "hipq_queue_backlog", queue="default") == 3
        assert _series(text, "hipq_queue_scheduled", queue="default") == 4
        # A scrape alone counts nothing: the figure is the last interval's.
        await api.post_job(type="ok")
        text = (await api.client.get("/metrics")).text
        assert _series(text, "hipq_queue_backlog", queue="default") == 3
        await api.tick()
        text = await scrape()
        assert _series(text, "hipq_queue_backlog", queue="default") == 0
        assert _series(text, "hipq_queue_running", queue="default") == 0
        assert _series(text, "hipq_queue_scheduled", queue="default") == 1  # the later one
        # A queue handed over loses its series here (its new owner exports them).
        await api.loop("default").release()
        text = await scrape()
        assert _series(text, "hipq_queue_backlog", queue="default") is None


async def test_jobs_held_is_what_the_last_tick_held(database_url: str) -> None:
    async with open_api(database_url) as api:
        put = await api.client.put("/v1/queues/default/forbidden-flags", json={"flags": ["frozen"]})
        assert put.status_code == 200, put.text
        await api.post_job(type="ok", flags=["frozen"])
        await api.tick(ticks=10)
        text = (await api.client.get("/metrics")).text
        held = {"queue": "default", "throttler": "forbidden_flags"}
        # One job held at every one of ten ticks is one job held, not ten.
        assert _series(text, "hipq_jobs_held", **held) == 1
        assert _series(text, "hipq_jobs_held", queue="default", throttler="concurrency") == 0
        await api.client.put("/v1/queues/default/forbidden-flags", json={"flags": []})
        await api.tick()
        text = (await api.client.get("/metrics")).text
        assert _series(text, "hipq_jobs_held", **held) == 0
        # Handed back, the queue's holds are its next owner's to report, not this process's.
        api.loop("default").assign(False)
        assert await api.loop("default").hand_back_if_done()
        text = (await api.client.get("/metrics")).text
        assert _series(text, "hipq_jobs_held", **held) is None
