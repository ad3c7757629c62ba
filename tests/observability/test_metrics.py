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
