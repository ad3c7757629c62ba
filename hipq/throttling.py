"""The throttler protocol and the chain that applies a queue's throttlers in order.

A throttler is a plugin of the entry-point group ``hipq.throttlers``. Each tick the
queue's loop gives it the due candidates (in queue order, already filtered by the
throttlers before it) and a read-only view of the queue's in-flight jobs, and it
returns a ``Verdict``: which candidates it admits, which it defers to a later
instant, and a short reason for each one it holds. Decisions are pure functions of
(candidates, view, now); the loop persists them.

The chain is conservative by construction: a throttler counts the candidates it
admits against its own limits even if a later throttler holds them, so every
limit holds for the final set (it may admit less than it could for one tick).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from hipq.jobs import Job, Start

log = logging.getLogger("hipq.throttling")


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
    """Read-only view of a queue's in-flight jobs and recent starts."""

    def __init__(self, in_flight: Iterable[InFlight], recent_starts: Sequence[Start] = ()) -> None:
        self.jobs: tuple[InFlight, ...] = tuple(in_flight)
        self.recent_starts: tuple[Start, ...] = tuple(recent_starts)
        self.total_weight: int = sum(j.weight for j in self.jobs)

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


@runtime_checkable
class Throttler(Protocol):
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
    ``scan_room(view) -> Collection[str | None]``, the groups (None: the other
    values) that could take a job at all; the loop then reads no other group.
    """

    label: str
    values: tuple[str, ...]
    # Whether jobs of other values (or none) can be admitted at all; if not, their
    # group is not worth a read of its own.
    others: bool = True


def scan_groups(stages: Sequence[Stage]) -> tuple[Stage, ScanGroups] | None:
    """The first stage that offers scan groups, and its groups."""
    for stage in stages:
        groups = getattr(stage.throttler, "scan_groups", None)
        if isinstance(groups, ScanGroups):
            return stage, groups
    return None


def reads_free_capacity_only(stages: Sequence[Stage]) -> bool:
    """Whether the due scan may stop at the queue's free capacity.

    True when every stage admits a prefix of its candidates in queue order, holding
    a job only for the capacity the ones before it took, or defers it (time windows):
    then no job beyond the first ``free units`` can be admitted this tick, and
    reading the rest of the backlog every tick would only cost the loop.
    """
    return all(getattr(s.throttler, "admits_in_order", False) for s in stages)


@dataclass(frozen=True, slots=True)
class Stage:
    """One configured throttler of a queue's chain."""

    name: str
    throttler: Throttler
    lets_critical_through: bool = False
    # Seconds of start history the throttler needs in its view (rate limits).
    lookback_seconds: float = 0.0


@dataclass(slots=True)
class ChainResult:
    admitted: list[Job] = field(default_factory=list)
    deferred: dict[int, datetime] = field(default_factory=dict)
    deferred_by: dict[int, str] = field(default_factory=dict)  # job id -> stage name
    held: dict[int, str] = field(default_factory=dict)
    held_by: Counter[str] = field(default_factory=Counter)  # stage name -> jobs it held
    errors: list[tuple[str, str]] = field(default_factory=list)  # (stage, message)


class ThrottlerFault(Exception):
    """A throttler raised or answered something that is not a valid verdict."""


def _checked(verdict: object, given: Mapping[int, Job], name: str) -> Verdict:
    if not isinstance(verdict, Verdict):
        raise ThrottlerFault(f"returned {type(verdict).__name__}, not a Verdict")
    decided = [*verdict.admitted, *verdict.deferred, *verdict.held]
    unknown = [i for i in decided if i not in given]
    if unknown:
        raise ThrottlerFault(f"decided on jobs it was not given: {unknown[:5]}")
    if len(decided) != len(set(decided)):
        raise ThrottlerFault("decided twice on the same job")
    for at in verdict.deferred.values():
        if not isinstance(at, datetime) or at.tzinfo is None:
            raise ThrottlerFault("deferred to something that is not an aware datetime")
    # Reasons are stored as text; anything else would fail the whole tick's transaction.
    if not all(r is None or isinstance(r, str) for r in verdict.held.values()):
        raise ThrottlerFault("held a job with a reason that is not a string")
    return verdict


def _judge(stage: Stage, survivors: list[Job]) -> tuple[set[int], list[Job]]:
    bypass = {j.id for j in survivors if j.critical and stage.lets_critical_through}
    return bypass, [j for j in survivors if j.id not in bypass]


def _record(
    result: ChainResult,
    stage: Stage,
    survivors: list[Job],
    bypass: set[int],
    judged: list[Job],
    answer: object,
) -> list[Job]:
    """Fold one stage's answer (a verdict, or the exception it raised) into ``result``."""
    by_id = {j.id: j for j in judged}
    try:
        if isinstance(answer, BaseException):
            raise answer
        verdict = _checked(answer, by_id, stage.name)
    except Exception as exc:  # a faulty plugin holds its candidates, never the queue
        log.error("throttler %s failed; it admits nothing this tick: %s", stage.name, exc)
        result.errors.append((stage.name, f"{type(exc).__name__}: {exc}"))
        verdict = Verdict(held={i: f"throttler {stage.name} failed" for i in by_id})
    admitted = set(verdict.admitted)
    result.deferred.update(verdict.deferred)
    result.deferred_by.update(dict.fromkeys(verdict.deferred, stage.name))
    for job_id in by_id:
        if job_id not in admitted and job_id not in verdict.deferred:
            result.held[job_id] = verdict.held.get(job_id) or f"held by {stage.name}"
            result.held_by[stage.name] += 1
    return [j for j in survivors if j.id in admitted or j.id in bypass]


def run_chain(
    stages: Sequence[Stage], candidates: Sequence[Job], view: RunningView, now: datetime
) -> ChainResult:
    """Apply ``stages`` in order, in this thread; only what every stage admits is admitted."""
    result = ChainResult()
    survivors = list(candidates)
    for stage in stages:
        if not survivors:
            break
        bypass, judged = _judge(stage, survivors)
        seen = view.without_critical() if stage.lets_critical_through else view
        try:
            answer: object = stage.throttler.decide(judged, seen, now) if judged else Verdict()
        except Exception as exc:
            answer = exc
        survivors = _record(result, stage, survivors, bypass, judged, answer)
    result.admitted = survivors
    return result


class GuardedChain:
    """Runs a queue's stages off the event loop, each with a time limit.

    Each stage has one worker thread: a throttler that overruns its limit admits
    nothing that tick, and while it is still busy it is not called again (so a hung
    plugin costs one thread, not one per tick).
    """

    def __init__(self, stages: Sequence[Stage], time_limit: float) -> None:
        self.stages = list(stages)
        self.time_limit = time_limit
        self._executors = [
            ThreadPoolExecutor(1, thread_name_prefix=f"hipq-throttler-{s.name}") for s in stages
        ]
        self._busy: list[asyncio.Future[Any] | None] = [None] * len(self.stages)

    async def run(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> ChainResult:
        result = ChainResult()
        survivors = list(candidates)
        loop = asyncio.get_running_loop()
        for i, stage in enumerate(self.stages):
            if not survivors:
                break
            bypass, judged = _judge(stage, survivors)
            answer: object = Verdict()
            busy = self._busy[i]
            if not judged:
                pass
            elif getattr(stage.throttler, "runs_inline", False):
                # Built-ins are pure and linear: no thread hop on every tick for them.
                seen = view.without_critical() if stage.lets_critical_through else view
                try:
                    answer = stage.throttler.decide(judged, seen, now)
                except Exception as exc:
                    answer = exc
            elif busy is not None and not busy.done():
                answer = ThrottlerFault(f"still busy after its time limit of {self.time_limit:g}s")
            else:
                seen = view.without_critical() if stage.lets_critical_through else view
                future = loop.run_in_executor(
                    self._executors[i], stage.throttler.decide, judged, seen, now
                )
                self._busy[i] = future
                try:
                    answer = await asyncio.wait_for(asyncio.shield(future), self.time_limit)
                except TimeoutError:
                    answer = ThrottlerFault(
                        f"took longer than its time limit of {self.time_limit:g}s"
                    )
                except Exception as exc:
                    answer = exc
            survivors = _record(result, stage, survivors, bypass, judged, answer)
        result.admitted = survivors
        return result

    def close(self) -> None:
        for executor in self._executors:
            executor.shutdown(wait=False, cancel_futures=True)
