"""The history page: each queue's attempts and each job type's execution times over
a period longer than the overview's hour, read from the attempts table, so that a
restart loses none of it."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from hipq.dashboard.overview import FAILURE_OUTCOMES, Activity, activity
from hipq.service import Service
from hipq.store.operator_reads import DURATION_SAMPLE, AttemptDuration


@dataclass(frozen=True, slots=True)
class Period:
    name: str  # as the query string says it
    length: timedelta
    slices: int


PERIODS = {
    p.name: p
    for p in (
        Period("1h", timedelta(hours=1), 12),
        Period("6h", timedelta(hours=6), 24),
        Period("24h", timedelta(days=1), 24),
        Period("7d", timedelta(days=7), 28),
    )
}
DEFAULT_PERIOD = "24h"


@dataclass(frozen=True, slots=True)
class TypeStats:
    """A job type's attempts in the period and how long they took (seconds)."""

    type: str
    count: int
    completed: int
    failed: int
    p50: float
    p95: float
    longest: float


@dataclass(frozen=True, slots=True)
class History:
    period: Period
    since: datetime
    queues: list[tuple[str, Activity]]
    types: list[TypeStats]
    sampled: int | None  # the attempts the statistics read, when it hit the sample's size


def percentile(ordered: Sequence[float], share: float) -> float:
    """The nearest-rank percentile of ``ordered`` (ascending, not empty): the value at
    or below which ``share`` of the values lie."""
    rank = max(math.ceil(share * len(ordered)), 1)
    return ordered[rank - 1]


def type_stats(durations: Sequence[AttemptDuration]) -> list[TypeStats]:
    """Count, outcomes and p50 / p95 / longest attempt per job type, busiest first."""
    by_type: dict[str, list[AttemptDuration]] = defaultdict(list)
    for d in durations:
        by_type[d.type].append(d)
    out = []
    for name, found in by_type.items():
        seconds = sorted(d.seconds for d in found)
        out.append(
            TypeStats(
                type=name,
                count=len(found),
                completed=sum(d.outcome == "completed" for d in found),
                failed=sum(d.outcome in FAILURE_OUTCOMES for d in found),
                p50=percentile(seconds, 0.50),
                p95=percentile(seconds, 0.95),
                longest=seconds[-1],
            )
        )
    out.sort(key=lambda t: (-t.count, t.type))
    return out


async def history(service: Service, period: Period, now: datetime) -> History:
    since = now - period.length
    store = service.store
    buckets = await store.attempt_buckets(since, now, period.slices)
    queues = [
        (
            name,
            activity([b for b in buckets if b.queue == name], since, period.length, period.slices),
        )
        for name in sorted(service.settings.queues)
    ]
    durations = await store.attempt_durations(since, now)
    sampled = len(durations) if len(durations) >= DURATION_SAMPLE else None
    return History(period, since, queues, type_stats(durations), sampled)
