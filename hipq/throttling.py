"""The throttler protocol, the types a throttler sees, and a chain's stage.

A throttler is a plugin of the entry-point group ``hipq.throttlers``. Each tick the
queue's loop gives it the due candidates (in queue order, already filtered by the
throttlers before it) and a read-only view of the queue's in-flight jobs, and it
returns a ``Verdict``: which candidates it admits, which it defers to a later
instant, and a short reason for each one it holds. Decisions are pure functions of
(candidates, view, now); the loop persists them.

``hipq.batch_loop.chain`` applies a queue's stages in order.
"""

from __future__ import annotations

import functools
import logging
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from hipq.jobs import Job, Start

if TYPE_CHECKING:
    from pydantic import BaseModel

    from hipq.outcomes import Outcome

log = logging.getLogger("hipq.throttling")

# The most capacity units (a queue's concurrency, a throttler's limit) hipq takes: far
# above any real capacity, and bounded so that sums of weights stay exact everywhere.
MAX_CAPACITY = 1_000_000_000

# HTTP statuses by which an external system says it is over its capacity.
OVERLOAD_STATUSES = frozenset({429, 503})


@dataclass(frozen=True, slots=True)
class InFlight:
    """A running or awaiting job, as throttlers see it."""

    id: int
    type: str
    weight: int
    labels: Mapping[str, str]
    claimed_at: datetime
    critical: bool = False
    payload: Mapping[str, Any] = field(default_factory=dict)


class RunningView:
    """Read-only view of a queue's in-flight jobs and recent starts.

    ``in_flight`` is read when a stage first looks at ``jobs`` (or ``total_weight``):
    a queue draining a backlog has thousands in flight, and a chain whose stages never
    look (time windows) would otherwise build each one's ``InFlight`` every tick."""

    def __init__(self, in_flight: Iterable[InFlight], recent_starts: Sequence[Start] = ()) -> None:
        self._in_flight = in_flight
        self.recent_starts: tuple[Start, ...] = tuple(recent_starts)

    @functools.cached_property
    def jobs(self) -> tuple[InFlight, ...]:
        return tuple(self._in_flight)

    @functools.cached_property
    def total_weight(self) -> int:
        return sum(j.weight for j in self.jobs)

    def weight_by(self, label: str) -> Counter[str | None]:
        """In-flight weight per value of ``label`` (None for jobs without it)."""
        counts: Counter[str | None] = Counter()
        for job in self.jobs:
            counts[job.labels.get(label)] += job.weight
        return counts

    def count_by(self, label: str) -> Counter[str | None]:
        return Counter(job.labels.get(label) for job in self.jobs)

    def without_critical(self) -> RunningView:
        """The view a stage that lets critical work through judges ordinary jobs by:
        critical jobs neither wait for it nor count towards its limit."""
        if not any(j.critical for j in self.jobs) and not any(
            s.critical for s in self.recent_starts
        ):
            return self
        return RunningView(
            (j for j in self.jobs if not j.critical),
            tuple(s for s in self.recent_starts if not s.critical),
        )

    def starts_since(self, since: datetime) -> list[Start]:
        return [s for s in self.recent_starts if s.at >= since]


@dataclass(slots=True)
class Verdict:
    admitted: list[int] = field(default_factory=list)  # job ids, in the order given
    deferred: dict[int, datetime] = field(default_factory=dict)  # not before this instant
    held: dict[int, str] = field(default_factory=dict)  # why it waits


@dataclass(frozen=True, slots=True)
class Feedback:
    """What one attempt's send told of the external system, as it is reported to the
    queue's loop: throttlers that adapt their rate (``on_feedback``) learn from it."""

    job_id: int
    labels: Mapping[str, str]
    claimed_at: datetime | None
    at: datetime
    # From the claim to the report: the send's latency plus the dispatch's (small) delay.
    latency_seconds: float | None
    # The HTTP status of an error answer (None: the request left, or no HTTP answer).
    status: int | None = None
    # The system said it is over its capacity (HTTP 429 or 503).
    overloaded: bool = False
    retry_after: datetime | None = None


def feedback_of(job: Job, outcome: Outcome | None, now: datetime) -> Feedback:
    """The feedback of ``job``'s send: ``outcome`` None means the request left."""
    status = None
    retry_after = None
    error = getattr(outcome, "error", None)
    if error is not None:
        retry_after = error.retry_after
        response = getattr(outcome, "response", None)
        if isinstance(response, Mapping) and isinstance(response.get("status"), int):
            status = response["status"]
    latency = None if job.claimed_at is None else max(0.0, (now - job.claimed_at).total_seconds())
    return Feedback(
        job.id,
        job.labels,
        job.claimed_at,
        now,
        latency,
        status,
        status in OVERLOAD_STATUSES,
        retry_after,
    )


def feed_back(
    stages: Sequence[Stage], job: Job, outcome: Outcome | None, clock: Callable[[], datetime]
) -> None:
    """Give the feedback of ``job``'s send to the stages that take it (none: nothing is
    computed, the report path stays as cheap as before). A plugin that raises is
    logged, never allowed to stop the report it rides on."""
    takers = [s for s in stages if s.on_feedback is not None]
    if not takers:
        return
    feedback = feedback_of(job, outcome, clock())
    for stage in takers:
        assert stage.on_feedback is not None
        try:
            stage.on_feedback(feedback)
        except Exception:
            log.exception("throttler %s failed on feedback", stage.name)


def throttler_states(stages: Sequence[Stage]) -> dict[str, Any]:
    """Stage name -> what its throttler learned (``state``), for the queue's stats."""
    out: dict[str, Any] = {}
    for stage in stages:
        if stage.state is not None:
            try:
                out[stage.name] = dict(stage.state())
            except Exception:
                log.exception("throttler %s failed to report its state", stage.name)
    return out


@runtime_checkable
class Throttler(Protocol):
    """What a throttler must have. The optional members are declared, with their
    defaults, on ``ThrottlerBase``; ``Stage.of`` reads them once per queue."""

    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict: ...


@dataclass(frozen=True, slots=True)
class ScanGroups:
    """Groups of a queue's jobs that a throttler judges apart: one per listed value of
    ``label``, and one for every other value or none (shares by region, say).

    A throttler offers them as its ``scan_groups`` attribute. When a tick's read of
    due jobs comes back full, the loop also reads the first due jobs of the groups
    that read did not reach (and, when it held jobs, of those it held none of), so
    that a held backlog of one group at the front of the queue cannot hide the jobs
    of the others behind it. A throttler may also have a method
    ``scan_room(view) -> Collection[str | None] | None``, the groups (None: the other
    values) that could take a job at all; the loop then reads no other group (an
    answer of None: every group may).
    """

    label: str
    values: tuple[str, ...]
    # Whether jobs of other values (or none) can be admitted at all; if not, their
    # group is not worth a read of its own.
    others: bool = True


# The scan groups that could take a job given the view; None: every group.
ScanRoom = Callable[[RunningView], Collection[str | None] | None]


class ThrottlerBase(ABC):
    """Every optional member of a throttler, with its default. A plugin may subclass
    it or set only the members it needs: hipq reads them once, in ``Stage.of``."""

    # A pydantic model that validates the throttler's settings at start (else it gets
    # the raw mapping); read from the class by ``hipq.plugins``.
    config_model: ClassVar[type[BaseModel] | None] = None
    # Pure and linear in the candidates: the loop calls it without a worker thread
    # (and without its time limit).
    runs_inline: ClassVar[bool] = False
    # Admits a prefix of the queue order (holding a job only for the capacity the
    # ones before it took) or defers: the loop may read only free capacity's worth.
    admits_in_order: ClassVar[bool] = False
    # Seconds of start history it needs in ``view.recent_starts`` (rate limits).
    lookback_seconds: float = 0.0
    # A label name: GET /v1/queues/{name} reports capacity in use per its value.
    label: str | None = None
    # Groups it judges apart (see ``ScanGroups``).
    scan_groups: ScanGroups | None = None
    # A label whose values it limits apart (per_key): when a read comes back full and
    # it held some values, the loop reads again past those values
    # (``hipq.batch_loop.key_reads``), so that one value's backlog cannot hide the others.
    scan_keys: str | None = None
    # The reason stored on the jobs it defers; None: "deferred by <stage name>".
    defer_reason: ClassVar[str | None] = None
    # Capacity units each value of ``label`` may hold (a key that is not a str stands
    # for every other value): the dashboard shows use against it, as for ``share``.
    quotas: Mapping[Hashable, int] | None = None
    # With ``lookback_seconds``, the starts allowed in that window (a rate limit): the
    # dashboard counts the window's starts against it, as for ``rate``.
    limit: int | None = None
    # Called on the event loop as each send is reported (the request left, or it failed
    # with an answer such as a 429): a throttler that adapts its rate learns here. A
    # method of that name; None (the default) spares the loop building the feedback.
    on_feedback: Callable[[Feedback], None] | None = None
    # A small JSON-able picture of what the throttler learned: a method of that name;
    # the queue view (GET /v1/queues/{name}) and the metrics show it.
    state: Callable[[], Mapping[str, Any]] | None = None

    def bind(self, queue: str, capacity: int | None) -> None:
        """Called once at start with the queue's name and concurrency; raise
        ``ValueError`` to refuse the configuration."""
        return None  # nothing to do by default

    def scan_room(self, view: RunningView) -> Collection[str | None] | None:
        """The scan groups that could take a job at all (None: every group)."""
        return None

    @abstractmethod
    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        """Admit, defer or hold each candidate (see ``Throttler``)."""


@dataclass(frozen=True, slots=True)
class Stage:
    """One configured throttler of a queue's chain, with its optional members read
    once (``Stage.of``), so the tick never probes the plugin."""

    name: str
    throttler: Throttler
    lets_critical_through: bool = False
    # Seconds of start history the throttler needs in its view (rate limits).
    lookback_seconds: float = 0.0
    runs_inline: bool = False
    admits_in_order: bool = False
    label: str | None = None
    scan_groups: ScanGroups | None = None
    scan_keys: str | None = None
    scan_room: ScanRoom | None = None
    defer_reason: str = ""
    on_feedback: Callable[[Feedback], None] | None = None
    state: Callable[[], Mapping[str, Any]] | None = None
    quotas: Mapping[Hashable, int] | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if not self.defer_reason:
            object.__setattr__(self, "defer_reason", f"deferred by {self.name}")

    @classmethod
    def of(cls, name: str, throttler: Throttler, lets_critical_through: bool = False) -> Stage:
        """The stage of ``throttler``: the one place its optional members are read."""
        t: Any = throttler
        groups = getattr(t, "scan_groups", None)
        keys = getattr(t, "scan_keys", None)
        room = getattr(t, "scan_room", None)
        label = getattr(t, "label", None)
        reason = getattr(t, "defer_reason", None)
        feedback = getattr(t, "on_feedback", None)
        state = getattr(t, "state", None)
        quotas = getattr(t, "quotas", None)
        limit = getattr(t, "limit", None)
        return cls(
            name,
            throttler,
            lets_critical_through,
            lookback_seconds=float(getattr(t, "lookback_seconds", 0.0) or 0.0),
            runs_inline=bool(getattr(t, "runs_inline", False)),
            admits_in_order=bool(getattr(t, "admits_in_order", False)),
            label=label if isinstance(label, str) else None,
            scan_groups=groups if isinstance(groups, ScanGroups) else None,
            scan_keys=keys if isinstance(keys, str) and keys else None,
            scan_room=room if callable(room) else None,
            defer_reason=reason if isinstance(reason, str) else "",
            on_feedback=feedback if callable(feedback) else None,
            state=state if callable(state) else None,
            quotas=quotas if isinstance(quotas, Mapping) else None,
            # bool is an int, and no limit.
            limit=limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
        )


def bind(throttler: Throttler, queue: str, capacity: int | None) -> None:
    """Give ``throttler`` its queue (the optional ``bind`` member)."""
    bound = getattr(throttler, "bind", None)
    if bound is not None:
        bound(queue, capacity)


def scan_groups(stages: Sequence[Stage]) -> Stage | None:
    """The first stage that offers scan groups."""
    return next((s for s in stages if s.scan_groups is not None), None)


def reads_free_capacity_only(stages: Sequence[Stage]) -> bool:
    """Whether the due scan may stop at the queue's free capacity.

    True when every stage admits a prefix of its candidates in queue order, holding
    a job only for the capacity the ones before it took, or defers it (time windows):
    then no job beyond the first ``free units`` can be admitted this tick, and
    reading the rest of the backlog every tick would only cost the loop.
    """
    return all(s.admits_in_order for s in stages)
