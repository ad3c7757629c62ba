"""What the overview page shows of each queue, read from the same places as the API."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from markupsafe import Markup

from hipq.api.models import QueueOut
from hipq.api.queues import queue_out
from hipq.batch_loop.limits import LimitsError, stages_with
from hipq.dashboard.charts import Series, TimeAxis, bars
from hipq.dashboard.display import duration
from hipq.service import Service
from hipq.store.operator_reads import AttemptBucket
from hipq.throttling import Stage

# The charts: the last hour in twelve slices of five minutes.
CHART_PERIOD = timedelta(hours=1)
CHART_SLICES = 12
FAILURE_OUTCOMES = frozenset({"failed", "retried", "timeout"})


@dataclass(frozen=True, slots=True)
class ShareUse:
    label: str
    value: str
    in_use: int
    quota: int | None  # None: a value without a share of its own


@dataclass(frozen=True, slots=True)
class RateUse:
    throttler: str
    key: str | None  # the label value counted, or None for the whole queue
    starts: int
    limit: int
    per: str


@dataclass(frozen=True, slots=True)
class Activity:
    """The queue's attempts over the chart period."""

    attempts: int
    failures: int
    throughput: Markup
    failure_rate: Markup


@dataclass
class QueueView:
    queue: QueueOut
    shares: list[ShareUse] = field(default_factory=list)
    rates: list[RateUse] = field(default_factory=list)
    reasons: list[tuple[str, int]] = field(default_factory=list)
    activity: Activity | None = None


async def queue_views(service: Service, now: datetime) -> list[QueueView]:
    """Every configured queue, with its throttlers' use and its last hour."""
    since = now - CHART_PERIOD
    buckets = await service.store.attempt_buckets(since, now, CHART_SLICES)
    views = []
    for name in sorted(service.settings.queues):
        view = QueueView(await queue_out(service, name))
        stages = _stages_in_force(service, name, view.queue)
        view.shares = _shares(stages, view.queue.in_use_by)
        view.rates = await _rates(service, name, stages, now)
        if view.queue.due:
            view.reasons = await service.store.job_due_reasons(name, now)
        view.activity = activity(
            [b for b in buckets if b.queue == name], since, CHART_PERIOD, CHART_SLICES
        )
        views.append(view)
    return views


def _stages_in_force(service: Service, name: str, queue: QueueOut) -> list[Stage]:
    """The chain with the limits an operator changed: the queue's owner may be another
    process, whose chain this one's loop does not hold."""
    overrides = queue.limits.overrides if queue.limits is not None else {}
    if overrides:
        try:
            return stages_with(name, service.settings, overrides)[1]
        except LimitsError:
            pass  # no longer fits the config: its owner runs the config's chain too
    return service.loops[name].stages


def _shares(stages: list[Stage], in_use_by: dict[str, dict[str, int]]) -> list[ShareUse]:
    """Capacity in use per label value, against the share's quota where a stage has
    quotas (the ``share`` throttler's ``quotas``: label value -> capacity units)."""
    out: list[ShareUse] = []
    seen: set[str] = set()
    for stage in stages:
        if stage.label is None or stage.label in seen:
            continue
        seen.add(stage.label)
        used = in_use_by.get(stage.label, {})
        quotas = stage.quotas or {}
        named = {k if isinstance(k, str) else "(other)": v for k, v in quotas.items()}
        for value in sorted(set(named) | set(used)):
            out.append(ShareUse(stage.label, value, used.get(value, 0), named.get(value)))
    return out


async def _rates(service: Service, queue: str, stages: list[Stage], now: datetime) -> list[RateUse]:
    """Starts within each rate limit's window (``rate``-like throttlers: a ``limit``
    and a ``lookback_seconds`` window, optionally per ``label`` value)."""
    out: list[RateUse] = []
    for stage in stages:
        limit = stage.limit
        if stage.lookback_seconds <= 0 or limit is None:
            continue
        starts = await service.store.job_recent_starts(
            queue, now - timedelta(seconds=stage.lookback_seconds)
        )
        label = stage.label
        counted = Counter(s.labels.get(label) if label else None for s in starts)
        per = duration(stage.lookback_seconds)
        for key in sorted(counted, key=str) or [None]:
            out.append(RateUse(stage.name, key, counted.get(key, 0), limit, per))
    return out


def activity(
    buckets: list[AttemptBucket], since: datetime, period: timedelta, slices: int
) -> Activity:
    """A queue's attempts over ``period`` from ``since`` in ``slices`` equal slices,
    as counts and the two charts."""
    done = [0] * slices
    failed = [0] * slices
    total = [0] * slices
    for b in buckets:
        total[b.bucket] += b.count
        if b.outcome == "completed":
            done[b.bucket] += b.count
        elif b.outcome in FAILURE_OUTCOMES:
            failed[b.bucket] += b.count
    step = period / slices
    shown = "%H:%M" if period <= timedelta(days=1) else "%m-%d %H:%M"
    names = [
        f"{(since + step * i):{shown}}-{(since + step * (i + 1)):{shown}} UTC"
        for i in range(slices)
    ]
    axis = TimeAxis(f"{since:{shown}}", f"{(since + period):{shown}} UTC")
    per = f"per {duration(step.total_seconds())}, {_span(period)}"
    rate = [100 * f / t if t else 0.0 for f, t in zip(failed, total, strict=True)]
    return Activity(
        attempts=sum(total),
        failures=sum(failed),
        throughput=bars(
            Series(
                done, [f"{s}: {n} completed" for s, n in zip(names, done, strict=True)], "#2f7d4f"
            ),
            f"completed attempts {per}",
            axis,
        ),
        failure_rate=bars(
            Series(
                rate,
                [f"{s}: {r:.0f}% failed" for s, r in zip(names, rate, strict=True)],
                "#b3261e",
                maximum=100,
                unit="%",
            ),
            f"share of attempts that failed {per}",
            axis,
        ),
    )


def _span(period: timedelta) -> str:
    return (
        "last hour" if period == timedelta(hours=1) else f"last {duration(period.total_seconds())}"
    )
