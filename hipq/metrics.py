"""Prometheus metrics, fed by the core's events (one registry per service)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from hipq.events import Events


class Metrics:
    def __init__(self, events: Events) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.admitted = Counter(
            "hipq_jobs_admitted", "Jobs claimed by a queue's loop", ["queue"], registry=r
        )
        self.settled = Counter(
            "hipq_jobs_settled",
            "Attempt outcomes persisted, by resulting state",
            ["queue", "state"],
            registry=r,
        )
        self.throttled = Counter(
            "hipq_jobs_held",
            "Due jobs held by a throttler (per tick)",
            ["queue", "throttler"],
            registry=r,
        )
        self.throttler_errors = Counter(
            "hipq_throttler_errors",
            "Throttler faults (it admitted nothing that tick)",
            ["queue", "throttler"],
            registry=r,
        )
        self.tick_failures = Counter(
            "hipq_tick_failures", "Failed loop ticks", ["queue"], registry=r
        )
        self.owned = Gauge(
            "hipq_queue_owned", "1 if this process runs the queue's loop", ["queue"], registry=r
        )
        events.subscribe(self.on_event)

    def on_event(self, name: str, f: dict[str, Any]) -> None:
        queue = f.get("queue", "")
        if name == "jobs_admitted":
            self.admitted.labels(queue).inc(f["count"])
        elif name == "job_settled":
            self.settled.labels(queue, f["state"]).inc()
        elif name == "throttled":
            for throttler, count in f["held_by"].items():
                self.throttled.labels(queue, throttler).inc(count)
        elif name == "throttler_error":
            self.throttler_errors.labels(queue, f["throttler"]).inc()
        elif name == "tick_failed":
            self.tick_failures.labels(queue).inc()
        elif name == "lease_acquired":
            self.owned.labels(queue).set(1)
        elif name == "lease_lost":
            self.owned.labels(queue).set(0)
