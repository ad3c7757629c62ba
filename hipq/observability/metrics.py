"""Prometheus metrics, fed by the core's events (one registry per service).

The labelled counters start with a series at 0 for every label value the config
names (queues, job types, outcomes): an alert on ``rate(...)`` or ``increase(...)``
then sees 0 before the first event, not "no data". The per-queue gauges come from
the ``queue_gauges`` event (hipq.process.queue_gauges): each process exports them for
the queues it owns, so that ``sum by (queue)`` over the processes is right.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from hipq.events import Events
from hipq.lifecycle import State

if TYPE_CHECKING:
    from hipq.config import Settings
    from hipq.store.records import QueueGauges

# What hipq_attempts_total's verdict label takes (hipq.outcomes' verdicts of an attempt).
VERDICTS = ("completed", "retried", "failed", "given_up", "cancelled")
# What an inbox response turns out to be (hipq_responses_settled_total's status).
RESPONSE_STATUSES = ("matched", "duplicate", "late", "expired")
# The per-queue gauges and what each counts (hipq.store.records.QueueGauges' fields).
QUEUE_GAUGES = {
    "backlog": "Jobs due and not yet admitted (scheduled, run_at passed)",
    "scheduled": "Jobs scheduled, due or not",
    "running": "Jobs running",
    "awaiting": "Jobs awaiting an external system's response",
    "failed": "Jobs failed for good (kept until job_retention.failed)",
}

# From a job's claim to the tick that matches its response: seconds to a day.
RESPONSE_WAIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400)
# From a job's run_at to its claim: milliseconds on an idle queue, hours behind a
# throttler or a full queue.
QUEUE_DELAY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400
)  # fmt: skip


class Metrics:
    def __init__(self, events: Events, settings: Settings | None = None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # The process's own (CPU, memory, open files, GC, Python version), as the
        # default registry has them: process_cpu_seconds_total, process_resident_memory_bytes.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.admitted = Counter(
            "hipq_jobs_admitted", "Jobs claimed by a queue's loop", ["queue"], registry=r
        )
        self.settled = Counter(
            "hipq_jobs_settled",
            "Attempt outcomes persisted, by resulting state",
            ["queue", "state"],
            registry=r,
        )
        self.held = Gauge(
            "hipq_jobs_held",
            "Due jobs held at the queue's last tick, by the throttler that held them",
            ["queue", "throttler"],
            registry=r,
        )
        self.queue_gauges = {
            name: Gauge(
                f"hipq_queue_{name}",
                f"{what}; exported by the queue's owner",
                ["queue"],
                registry=r,
            )
            for name, what in QUEUE_GAUGES.items()
        }
        self._gauged: set[str] = set()  # the queues whose gauges this process exports
        self._held: dict[str, set[str]] = {}  # queue -> the throttlers of its held series
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
        if settings is not None:
            self._zero_series(settings)
        events.subscribe(self.on_event)

    def _zero_series(self, settings: Settings) -> None:
        """A series at 0 for each label value the config names (see the docstring)."""
        for queue in settings.queues:
            for counter in (self.admitted, self.tick_failures, self.sent):
                counter.labels(queue)
            for state in (State.COMPLETED, State.FAILED, State.CANCELLED, State.SCHEDULED):
                self.settled.labels(queue, state.value)
            self.owned.labels(queue)
            self.queue_delay.labels(queue)
            self.response_wait.labels(queue)
        for name, job_type in settings.job_types.items():
            for verdict in VERDICTS:
                self.attempts.labels(job_type.queue, name, verdict, "")
        for status in RESPONSE_STATUSES:
            self.responses_settled.labels(status)
        for state in (State.COMPLETED, State.FAILED, State.CANCELLED):
            self.pruned.labels(state.value)
        self.stored.labels("webhook")
        if settings.kafka.enabled:  # hipq.process.kafka_consumer names them kafka:<topic>
            for source in settings.kafka.responses:
                self.stored.labels(f"kafka:{source.topic}")
                self.parked.labels(f"kafka:{source.topic}")

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
        elif name == "throttled":  # every tick, zeros included
            for throttler, count in f["held_by"].items():
                self.held.labels(queue, throttler).set(count)
                self._held.setdefault(queue, set()).add(throttler)
                self.throttler_errors.labels(queue, throttler)  # its series at 0
        elif name == "queue_gauges":
            self._set_queue_gauges(f["queues"])
        elif name == "throttler_error":
            self.throttler_errors.labels(queue, f["throttler"]).inc()
        elif name == "tick_failed":
            self.tick_failures.labels(queue).inc()
        elif name == "lease_acquired":
            self.owned.labels(queue).set(1)
        elif name in ("lease_lost", "lease_handed_back"):
            self.owned.labels(queue).set(0)
            # Its new owner reports what it holds: a stale figure here would be summed.
            for throttler in self._held.pop(queue, ()):
                self.held.remove(queue, throttler)
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

    def _set_queue_gauges(self, counts: dict[str, QueueGauges]) -> None:
        """The owned queues' figures; a queue no longer owned loses its series (its new
        owner exports them), rather than keep a stale figure that sum() would add."""
        for queue in self._gauged - counts.keys():
            for gauge in self.queue_gauges.values():
                gauge.remove(queue)
        for queue, figures in counts.items():
            for name, gauge in self.queue_gauges.items():
                gauge.labels(queue).set(getattr(figures, name))
        self._gauged = set(counts)
