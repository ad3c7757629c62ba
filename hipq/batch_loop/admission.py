"""Admission for one queue: the due read (sized to free capacity), the throttler
chain, waiting reasons and the queue's stats, inside a tick's transaction.

It claims what the chain admits, defers or annotates the rest, and returns what it
did as a plain ``Admitted``; the loop dispatches the claimed jobs after the commit.
It also keeps the start history that rate limits need (and the loop's wake uses).
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hipq import forbidden_flags, waiting
from hipq.batch_loop import key_reads
from hipq.batch_loop.chain import ChainResult, GuardedChain
from hipq.batch_loop.group_reads import GroupReads
from hipq.config import QueueConfig
from hipq.events import Events
from hipq.jobs import Job, Start
from hipq.store import QueueBatch, Store
from hipq.throttling import (
    InFlight,
    RunningView,
    Stage,
    reads_free_capacity_only,
    scan_groups,
    throttler_states,
)


@dataclass(slots=True)
class Admitted:
    """What one tick's admission did."""

    claimed: list[Job] = field(default_factory=list)
    held: int = 0
    deferred: int = 0
    loaded: int = 0
    full: bool = False  # the due scan filled a whole batch: more may be waiting
    held_by: Counter[str] = field(default_factory=Counter)  # stage name -> jobs it held


class Admission:
    def __init__(
        self, queue: str, config: QueueConfig, stages: list[Stage], events: Events
    ) -> None:
        self.queue, self.config, self.stages, self.events = queue, config, stages, events
        self.chain = GuardedChain(stages, config.throttler_time_limit)
        # With a capacity and only in-order stages, a tick reads no more due jobs than
        # the free capacity could take (not a whole batch to admit a few).
        # A queue that takes a label's values in turn reads whole batches: it must see
        # the values behind the first one's backlog.
        self.turns = config.round_robin_label
        self.scan_free = (
            config.concurrency is not None
            and reads_free_capacity_only(stages)
            and self.turns is None
        )
        # The first stage that limits a label's values apart (per_key).
        self.key_stage = next((s for s in stages if s.scan_keys is not None), None)
        grouping = scan_groups(stages)
        self.group_reads = GroupReads(queue, config, grouping) if grouping else None
        # The last tick held jobs at a stage that limits starts over time (rate): the
        # loop wakes when the oldest start leaves such a window, not a whole tick later.
        self.held_by_rate = False
        # Start history for rate limits: kept in memory by the owner, rebuilt from the
        # database when the lease is taken (so limits hold across restarts and processes).
        self.lookback = max((s.lookback_seconds for s in stages), default=0.0)
        self.starts: deque[Start] = deque()
        self._defer_reasons = {s.name: s.defer_reason for s in stages}
        self._stat_labels = sorted({s.label for s in stages if s.label is not None})
        self._stats: dict[str, Any] | None = None
        self._errors: Counter[str] = Counter()
        # The chain is the time windows stage alone (hipq.batch_loop.chain): each due job
        # without windows or flags is admitted whatever else is due or running, so the
        # store may claim such jobs in its due scan (``claims_at_scan``).
        self._windows_only = (
            not config.throttlers and config.concurrency is None and self.turns is None
        )

    async def resume(self, store: Store, now: datetime) -> None:
        """The lease was taken: forget the last owner's view, reload the start history."""
        if self.scan_free:
            assert self.config.concurrency is not None
            await store.job_note_oversized(self.queue, self.config.concurrency)
        self._stats = None
        self.starts = deque()
        if self.lookback > 0:
            since = now - timedelta(seconds=self.lookback)
            self.starts.extend(await store.job_recent_starts(self.queue, since))

    @property
    def claims_at_scan(self) -> bool:
        """Whether a tick that would only claim may claim in the due scan
        (``Store.queue_claim_due``): the chain would admit each job that scan claims,
        and the queue's stats, unchanged by such a tick, are stored."""
        return self._windows_only and self._stats == self._stats_of([], Counter())

    def admitted_at_scan(self, claimed: list[Job], loaded: int) -> Admitted:
        """What the store claimed in its due scan of ``loaded`` jobs, as ``admit`` tells
        it: the chain held nothing."""
        self.held_by_rate = False
        self._emit_held(Counter())
        full = loaded >= self.config.batch_size
        return Admitted(claimed=claimed, loaded=loaded, full=full)

    def scans(self, live: Iterable[Job]) -> bool:
        """Whether ``admit`` would begin with the due scan (capacity is free)."""
        capacity = self.config.concurrency
        return capacity is None or sum(j.weight for j in live) < capacity

    async def admit(self, batch: QueueBatch, live: list[Job], now: datetime) -> Admitted:
        """Read due jobs, run the chain over them against ``live`` (the in-flight jobs
        that stay), claim the admitted, defer or annotate the rest."""
        self.held_by_rate = False
        out = Admitted()
        capacity = self.config.concurrency
        in_use = sum(j.weight for j in live) if capacity is not None else 0
        if capacity is not None and in_use >= capacity:
            # Full: nothing can be admitted, so do not read (and re-hold) the backlog;
            # count what it holds (as a read would have: a batch at most), and say
            # why in the stats, which a reader of a due job is told (hipq.waiting).
            await batch.fence()
            if batch.paused:  # the loop counts what the pause holds (hold_paused)
                return out
            held = await self._due_held("concurrency", batch, now)
            full = waiting.queue_full(in_use, capacity)
            await self._write_stats(batch, live, held, now, holds_all=full)
            return out
        scan, max_weight = self.config.batch_size, None
        if self.scan_free:
            assert capacity is not None
            # Every job weighs at least 1; one heavier than the whole capacity could
            # never run and would only take a place in the read (see resume).
            scan, max_weight = min(scan, capacity - in_use), capacity
        candidates = await batch.job_due(
            now, scan, self.config.order, self.config.aging, max_weight=max_weight
        )
        if batch.paused:  # learnt with the scan (the lease fence went with it)
            return out
        out.full = len(candidates) >= self.config.batch_size
        if not candidates:
            await self._write_stats(batch, live, Counter(), now)
            return out
        self._forget_starts(now)
        # Built only if a stage looks at it (``RunningView.jobs``).
        view = RunningView((_in_flight_view(j) for j in live), tuple(self.starts))
        chain = await self._decide(batch, candidates, view, now)
        if out.full and self.group_reads is not None:
            # More are due than were read: a backlog of one group at the front may
            # hide other groups' jobs. Read the heads of those groups, decide again.
            wanted = self.group_reads.wanted(candidates, chain.held, view)
            if wanted:
                merged = await self.group_reads.read(batch, candidates, wanted, now, scan)
                if len(merged) > len(candidates):
                    candidates = merged
                    chain = await self._decide(batch, candidates, view, now)
        if out.full and (self.turns is not None or self.key_stage is not None):
            candidates, chain = await self._read_past_values(
                batch, candidates, chain, view, now, scan
            )
        out.loaded = len(candidates)
        for stage, message in chain.errors:
            self._errors[stage] += 1
            self.events.emit("throttler_error", queue=self.queue, throttler=stage, error=message)
        out.claimed = await batch.job_claim(chain.admitted, now)
        await self._defer(batch, chain.deferred, chain.deferred_by, now)
        stored = {j.id: j.waiting_reason for j in candidates}
        changed = {i: r for i, r in chain.held.items() if not _same_reason(stored.get(i), r)}
        await batch.job_note_waiting(changed)
        out.held, out.deferred, out.held_by = len(chain.held), len(chain.deferred), chain.held_by
        self.held_by_rate = any(
            s.lookback_seconds > 0 and chain.held_by.get(s.name) for s in self.stages
        )
        if self.lookback > 0:
            self.starts.extend(
                Start(at=now, labels=j.labels, critical=j.critical) for j in out.claimed
            )
        await self._write_stats(batch, live + out.claimed, chain.held_by, now)
        return out

    async def _decide(
        self, batch: QueueBatch, candidates: list[Job], view: RunningView, now: datetime
    ) -> ChainResult:
        """The throttler chain's decision, after the queue's forbidden flags held theirs;
        in a round-robin queue over the candidates in turn order, and a held job that
        another value's turn went before says so."""
        allowed, forbidden = forbidden_flags.split(candidates, batch.forbidden_flags)
        if self.turns is not None:
            order, aging = self.config.order, self.config.aging
            allowed = key_reads.in_turn(allowed, self.turns, view.jobs, order, aging)
        chain = await self.chain.run(allowed, view, now)
        if self.turns is not None:
            queue_ordered = key_reads.merged(self.config.order, self.config.aging, allowed)
            notes = key_reads.turn_notes(queue_ordered, chain.admitted, chain.held, self.turns)
            chain.held.update(notes)
        if forbidden:
            chain.held.update(forbidden)
            chain.held_by[forbidden_flags.STAGE] += len(forbidden)
        return chain

    async def _read_past_values(
        self,
        batch: QueueBatch,
        candidates: list[Job],
        chain: ChainResult,
        view: RunningView,
        now: datetime,
        scan: int,
    ) -> tuple[list[Job], ChainResult]:
        """More are due than were read: read again past the values that need not be
        read further (``hipq.batch_loop.key_reads``) and decide over every read, a few
        rounds at most."""
        order, aging = self.config.order, self.config.aging
        for _ in range(key_reads.ROUNDS):
            if self.turns is not None:
                label = self.turns
                skip = key_reads.seen_values(candidates, label)
            else:
                assert self.key_stage is not None and self.key_stage.scan_keys is not None
                label = self.key_stage.scan_keys
                if not chain.held_by.get(self.key_stage.name):
                    break
                skip = key_reads.held_values(candidates, chain.held, label)
            if not skip:
                break
            more = await batch.job_due(now, scan, order, aging, label=label, other_than=skip)
            found = key_reads.merged(order, aging, candidates, more)
            if len(found) == len(candidates):
                break
            candidates = found
            chain = await self._decide(batch, candidates, view, now)
            if len(more) < scan:
                break
        return candidates, chain

    async def _defer(
        self,
        batch: QueueBatch,
        deferred: dict[int, datetime],
        deferred_by: dict[int, str],
        now: datetime,
    ) -> None:
        """Store deferrals with the reason of the stage that deferred them."""
        by_stage: dict[str, dict[int, datetime]] = {}
        for job_id, at in deferred.items():
            by_stage.setdefault(deferred_by.get(job_id, "?"), {})[job_id] = at
        for stage, jobs in by_stage.items():
            reason = self._defer_reasons.get(stage) or f"deferred by {stage}"
            await batch.job_defer(jobs, reason, now)

    def rate_wake(self, now: datetime) -> datetime | None:
        """When the oldest start leaves the window of a stage that held jobs for its
        rate last tick (just after it: the window is (now - per, now])."""
        if not self.held_by_rate:
            return None
        wake = None
        for stage in self.stages:
            if stage.lookback_seconds > 0:
                window = timedelta(seconds=stage.lookback_seconds)
                oldest = next((s.at for s in self.starts if s.at > now - window), None)
                if oldest is not None:
                    at = oldest + window + _RATE_SLACK
                    wake = at if wake is None else min(wake, at)
        return wake

    def _forget_starts(self, now: datetime) -> None:
        horizon = now - timedelta(seconds=self.lookback)
        while self.starts and self.starts[0].at < horizon:
            self.starts.popleft()

    async def hold_paused(self, batch: QueueBatch, live: list[Job], now: datetime) -> None:
        """A paused queue's tick: its due jobs (a batch at most) are held by the pause.
        Their reason is the queue's row (``hipq.waiting``), not written on each job."""
        await self._write_stats(batch, live, await self._due_held(PAUSED_STAGE, batch, now), now)

    async def _due_held(self, stage: str, batch: QueueBatch, now: datetime) -> Counter[str]:
        """The due jobs ``stage`` holds, all of them: counted as far as a due read
        would have read them (``batch_size``); no stage when there are none."""
        held = Counter({stage: await batch.job_due_count(now, self.config.batch_size)})
        return +held  # drops a zero count

    async def _write_stats(
        self,
        batch: QueueBatch,
        live: list[Job],
        held_by: Counter[str],
        now: datetime,
        holds_all: str | None = None,
    ) -> None:
        """What an operator sees in GET /v1/queues/{name}; written only when it changes.
        The jobs each stage held this tick go out every tick, zeros included: the
        ``hipq_jobs_held`` gauge is what the last tick held, not what some tick did."""
        self._emit_held(held_by)
        stats = self._stats_of(live, held_by)
        if holds_all is not None:
            stats[waiting.HOLDS_ALL] = holds_all
        learned = stats.get("throttler_state")
        if stats != self._stats:
            await batch.queue_write_stats({**stats, "updated_at": now.isoformat()})
            if learned and learned != (self._stats or {}).get("throttler_state"):
                self.events.emit("throttler_state", queue=self.queue, states=learned)
            self._stats = stats

    def _emit_held(self, held_by: Counter[str]) -> None:
        names = [PAUSED_STAGE, forbidden_flags.STAGE, *(s.name for s in self.stages)]
        held = dict.fromkeys(names, 0) | dict(held_by)
        self.events.emit("throttled", queue=self.queue, held_by=held)

    def _stats_of(self, live: list[Job], held_by: Counter[str]) -> dict[str, Any]:
        in_use: dict[str, dict[str, int]] = {}
        for label in self._stat_labels:
            by_value: Counter[str] = Counter()
            for job in live:
                by_value[job.labels.get(label, "(none)")] += job.weight
            in_use[label] = dict(by_value)
        stats = {
            "held_by": dict(held_by),
            "in_use_by": in_use,
            "throttler_errors": dict(self._errors),
        }
        learned = throttler_states(self.stages)
        if learned:
            stats["throttler_state"] = learned
        return stats


PAUSED_STAGE = "paused"  # the name a paused queue's holds are counted under (held_by)
_RATE_SLACK = timedelta(milliseconds=1)
_DIGITS = re.compile(r"\d+")


def _same_reason(stored: str | None, new: str) -> bool:
    """Whether a held job's stored reason still says the same thing.

    Counts in a reason ("share region=east 39/40 in use") move every tick; rewriting
    every held row for that would cost more than the tick itself, so only a change of
    throttler or wording is written.
    """
    return stored is not None and _DIGITS.sub("#", stored) == _DIGITS.sub("#", new[:500])


def _in_flight_view(job: Job) -> InFlight:
    return InFlight(
        id=job.id,
        type=job.type,
        weight=job.weight,
        labels=job.labels,
        claimed_at=job.claimed_at or job.updated_at,
        critical=job.critical,
        payload=job.payload,
    )
