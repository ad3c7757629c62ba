"""Prometheus metrics, fed by the core's events (one registry per service)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from hipq.events import Events

# From a job's claim to the tick that matches its response: seconds to a day.
RESPONSE_WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400)
# From a job's run_at to its claim: milliseconds on an idle queue, hours behind a
# throttler or a full queue.
QUEUE_DELAY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400
)  # fmt: skip


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
        self.sent = Counter(
            "hipq_jobs_sent_total",
            "Requests sent to external systems; the job now awaits its response",
            ["queue"],
            registry=r,
        )
        self.stored = Counter(
            "hipq_responses_stored_total",
            "Responses stored in the inbox, by source (webhook, kafka:<topic>)",
            ["source"],
            registry=r,
        )
        self.parked = Counter(
            "hipq_responses_parked_total",
            "Kafka messages that could not be read as responses, parked with a reason",
            ["source"],
            registry=r,
        )
        self.responses_settled = Counter(
            "hipq_responses_settled_total",
            "Inbox responses settled, by what they turned out to be",
            ["status"],
            registry=r,
        )
        self.pruned = Counter(
            "hipq_jobs_pruned_total",
            "Finished jobs deleted after their job_retention, by state",
            ["state"],
            registry=r,
        )
        self.response_wait = Histogram(
            "hipq_response_wait_seconds",
            "Time from a job's claim to the tick that matched its response",
            ["queue"],
            buckets=RESPONSE_WAIT_BUCKETS,
            registry=r,
        )
        self.queue_delay = Histogram(
            "hipq_queue_delay_seconds",
            "Time from a job's run_at (when it became due) to its claim by the queue's loop",
            ["queue"],
            buckets=QUEUE_DELAY_BUCKETS,
            registry=r,
        )
        self.attempts = Counter(
            "hipq_attempts_total",
            "Attempt outcomes by job type and verdict (completed, retried, failed, given_up,"
            " cancelled) and the failed attempt's error kind (timeout, http, ...)",
            ["queue", "type", "verdict", "error_kind"],
            registry=r,
        )
        self.throttler_rate = Gauge(
            "hipq_throttler_rate",
            "The start rate an adaptive throttler allows now, in starts per its window, "
            "per label value (* without a label)",
            ["queue", "throttler", "key"],
            registry=r,
        )
        self.status_polls = Counter(
            "hipq_status_polls_total",
            "Status requests sent for overdue callbacks, by job type and what the answer was"
            " (final, working, error)",
            ["type", "verdict"],
            registry=r,
        )
        events.subscribe(self.on_event)

    def on_event(self, name: str, f: dict[str, Any]) -> None:
        queue = f.get("queue", "")
        if name == "jobs_admitted":
            self.admitted.labels(queue).inc(f["count"])
            delay = self.queue_delay.labels(queue)
            for job in f.get("jobs", ()):
                if job.claimed_at is not None:
                    delay.observe(max(0.0, (job.claimed_at - job.run_at).total_seconds()))
        elif name == "job_settled":
            self.settled.labels(queue, f["state"]).inc()
            if f.get("verdict"):  # an attempt's outcome (not a late response's)
                kind = f.get("error_kind") or ""
                self.attempts.labels(queue, f.get("type") or "", f["verdict"], kind).inc()
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
        elif name == "jobs_pruned":
            self.pruned.labels(f["state"]).inc(f["count"])
        elif name == "jobs_sent":
            self.sent.labels(queue).inc(f["count"])
        elif name == "responses_stored":
            self.stored.labels(f["source"]).inc(f["count"])
        elif name == "responses_parked":
            self.parked.labels(f["source"]).inc(f["count"])
        elif name == "status_polled":
            self.status_polls.labels(f["type"], f["verdict"]).inc()
        elif name == "throttler_state":
            for throttler, keys in f["states"].items():
                for key, state in keys.items():
                    if isinstance(state, dict) and isinstance(state.get("rate"), int | float):
                        self.throttler_rate.labels(queue, throttler, key).set(state["rate"])
        elif name == "responses_settled":
            self.responses_settled.labels(f["status"]).inc(f["count"])
            for seconds in f.get("waits", ()):
                self.response_wait.labels(queue).observe(seconds)
