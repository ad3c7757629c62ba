"""The batch loop of one queue: the single writer of its in-flight jobs.

Each tick, in one transaction fenced by the queue's lease:
  1. settle the outcomes that transports reported (and timeouts, cancellations),
  2. load due jobs in the queue's order,
  3. run the throttler chain against the in-flight view,
  4. claim what it admits, defer or annotate the rest,
then, after the commit, dispatch the claimed jobs. A job that reached an outcome
in memory is persisted before it is forgotten, and only ever runs again after it
was loaded back from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hipq.config import QueueConfig
from hipq.events import Events
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.outcomes import Cancelled, Failed, Outcome, Settlement, response_outcome, settle
from hipq.plugins import RetryStrategies
from hipq.queue_order import job_order_key
from hipq.retry import AttemptError
from hipq.store import LeaseLost, Store
from hipq.templates import KeyTemplate, TemplateError
from hipq.throttling import (
    GuardedChain,
    InFlight,
    RunningView,
    Stage,
    Start,
    reads_free_capacity_only,
    scan_groups,
)
from hipq.transports.base import Transport

log = logging.getLogger("hipq.loop")

_RATE_SLACK = timedelta(milliseconds=1)

Clock = Callable[[], datetime]
RECHECK_SECONDS = 2.0


@dataclass(slots=True)
class TickReport:
    settled: int = 0
    admitted: int = 0
    held: int = 0
    deferred: int = 0
    loaded: int = 0
    full: bool = False  # the due scan filled a whole batch: more may be waiting


@dataclass(slots=True)
class _Inbox:
    """What transports reported since the last tick (swapped out whole each tick)."""

    outcomes: dict[tuple[int, int], Outcome] = field(default_factory=dict)
    sent: set[tuple[int, int]] = field(default_factory=set)
    deadlines: dict[int, datetime] = field(default_factory=dict)
    payloads: dict[int, dict[str, Any]] = field(default_factory=dict)

    def merge_back(self, newer: _Inbox) -> None:
        """Put a failed tick's reports back in front of what arrived meanwhile."""
        self.outcomes = {**self.outcomes, **newer.outcomes}
        self.sent |= newer.sent
        self.deadlines.update(newer.deadlines)
        self.payloads.update(newer.payloads)


class QueueLoop:
    def __init__(
        self,
        name: str,
        config: QueueConfig,
        store: Store,
        *,
        owner: str,
        stages: Sequence[Stage],
        transports: Mapping[str, Transport],
        retry: RetryStrategies,
        clock: Clock,
        events: Events | None = None,
        lease_ttl: float = 15.0,
        correlated: bool = False,
        key_templates: Mapping[str, KeyTemplate] | None = None,
        late_types: Sequence[str] = (),
        signed_types: Sequence[str] = (),
    ) -> None:
        self.name, self.config, self.store = name, config, store
        self.owner, self.stages, self.transports = owner, list(stages), transports
        self.retry, self.clock = retry, clock
        self.events = events or Events()
        self.lease_ttl = lease_ttl
        # Queues with http/kafka job types match the responses inbox every tick.
        self.correlated = correlated
        # Job types whose correlation key needs the job's id or attempt: built at claim.
        self.key_templates = dict(key_templates or {})
        # Job types that accept a late successful response (late_responses: accept).
        self.late_types = list(late_types)
        # Job types whose callbacks must be signed: only verified responses settle them.
        self.signed_types = list(signed_types)
        self.token: int | None = None
        self.in_flight: dict[int, Job] = {}
        self._inbox = _Inbox()
        self.chain = GuardedChain(self.stages, config.throttler_time_limit)
        # With a capacity and only in-order stages, a tick reads no more due jobs than
        # the free capacity could take (not a whole batch to admit a few).
        self._scan_free = config.concurrency is not None and reads_free_capacity_only(self.stages)
        grouping = scan_groups(self.stages)
        self._group_stage, self._groups = grouping if grouping else (None, None)
        self._empty_groups: dict[str | None, float] = {}  # group -> when found empty
        # The last tick held jobs at a stage that limits starts over time (rate): the
        # loop wakes when the oldest start leaves such a window, not a whole tick later.
        self._held_by_rate = False
        # Start history for rate limits: kept in memory by the owner, rebuilt from the
        # database when the lease is taken (so limits hold across restarts and processes).
        self._lookback = max((s.lookback_seconds for s in self.stages), default=0.0)
        self._starts: deque[Start] = deque()
        self._stat_labels = sorted(
            {
                lbl
                for s in self.stages
                if isinstance(lbl := getattr(s.throttler, "label", None), str)
            }
        )
        self._stats: dict[str, Any] | None = None
        self._errors: Counter[str] = Counter()
        self.wake = asyncio.Event()
        self._stopping = False
        # Cancel requests and inbox responses are looked for when something hinted at
        # them, and at least every RECHECK_SECONDS (a hint from another process may be
        # lost while its LISTEN connection reconnects).
        self._check_cancels = self._check_responses = True
        self._last_recheck = time.monotonic()

    # -- what transports call (through the Reporter protocol) ---------------------

    def outcome(self, job: Job, outcome: Outcome) -> None:
        self._inbox.outcomes.setdefault((job.id, job.attempt), outcome)
        self.wake.set()

    def sent(self, job: Job) -> None:
        self._inbox.sent.add((job.id, job.attempt))
        self.wake.set()

    def heartbeat(self, job: Job, deadline: datetime) -> None:
        if job.id in self.in_flight:
            self._inbox.deadlines[job.id] = deadline

    def checkpoint(self, job: Job, payload: dict[str, Any]) -> None:
        if job.id in self.in_flight:
            self._inbox.payloads[job.id] = payload

    def hint_cancels(self) -> None:
        self._check_cancels = True
        self.wake.set()

    def hint_responses(self) -> None:
        self._check_responses = True
        self.wake.set()

    def _recheck_due(self) -> bool:
        if time.monotonic() - self._last_recheck >= RECHECK_SECONDS:
            self._last_recheck = time.monotonic()
            self._check_cancels = self._check_responses = True
        return self._check_cancels or self._check_responses

    # -- ownership ------------------------------------------------------------------

    async def acquire(self) -> bool:
        """Take the queue's lease if free; then reload and resume its in-flight jobs."""
        token = await self.store.lease_acquire(self.name, self.owner, self.clock(), self.lease_ttl)
        if token is None:
            return False
        self.token = token
        if self._scan_free:
            assert self.config.concurrency is not None
            await self.store.job_note_oversized(self.name, self.config.concurrency)
        self.in_flight = {j.id: j for j in await self.store.job_in_flight(self.name)}
        self._inbox, self._stats = _Inbox(), None
        self._starts = deque()
        if self._lookback > 0:
            since = self.clock() - timedelta(seconds=self._lookback)
            self._starts.extend(await self.store.job_recent_starts(self.name, since))
        # After a crash, `running` jobs may or may not have sent their request: send again
        # (at-least-once). `awaiting` jobs keep waiting for their response until the deadline.
        resumed = [j for j in self.in_flight.values() if j.state == State.RUNNING]
        self.events.emit("lease_acquired", queue=self.name, token=token, resumed=len(resumed))
        self._dispatch(resumed)
        return True

    def _lose_lease(self) -> None:
        self.events.emit("lease_lost", queue=self.name, token=self.token)
        for job_id in list(self.in_flight):
            self._transport_of(self.in_flight[job_id]).abandon(job_id)
        self.token, self.in_flight, self._inbox = None, {}, _Inbox()

    async def release(self) -> None:
        if self.token is not None:
            await self.store.lease_release(self.name, self.owner, self.token)
            self.token = None

    # -- one tick -------------------------------------------------------------------

    async def run_once(self) -> TickReport:
        """One tick; the caller must own the lease (``acquire``)."""
        if self.token is None:
            raise RuntimeError(f"queue {self.name}: run_once without the lease")
        now = self.clock()
        inbox, self._inbox = self._inbox, _Inbox()
        report = TickReport()
        # Events of what the tick writes: emitted once its transaction has committed.
        committed: list[tuple[str, dict[str, Any]]] = []
        try:
            async with self.store.queue_batch(
                self.name, self.owner, self.token, now, self.lease_ttl
            ) as batch:
                self._recheck_due()
                cancels: list[int] = []
                if self._check_cancels:
                    self._check_cancels = False
                    cancels = await batch.job_cancel_requests()
                matched = await self._match(batch, committed)
                settlements = self._settlements(inbox, cancels, now, matched)
                await batch.job_settle(settlements, now)
                settled = {s.job_id for s in settlements}
                used = [(r, j) for j, (r, _o) in matched.items() if j in settled]
                await batch.response_mark(used, [], now)
                if used:
                    committed.append(self._matched_event(used, now))
                await batch.job_mark_awaiting(self._sent_pairs(inbox, settlements), now)
                await batch.job_extend_deadlines(self._live(inbox.deadlines, settlements))
                await batch.job_set_payloads(self._live(inbox.payloads, settlements))
                claimed: list[Job] = []
                if not batch.paused:
                    claimed = await self._admit(batch, settlements, now, report)
        except LeaseLost:
            self._lose_lease()
            return report
        except Exception:
            self._inbox, fresh = inbox, self._inbox
            self._inbox.merge_back(fresh)
            self._check_cancels = self._check_responses = True  # look again next tick
            raise
        for name, fields in committed:
            self.events.emit(name, **fields)
        self._apply(inbox, settlements, claimed, now)
        report.settled = len(settlements)
        self._dispatch(claimed)
        return report

    async def _match(
        self, batch: Any, committed: list[tuple[str, dict[str, Any]]]
    ) -> dict[int, tuple[int, Outcome]]:
        """job id -> (response id, outcome) for pending responses of in-flight jobs."""
        if not self.correlated or not self._check_responses:
            return {}
        self._check_responses = False
        if self.late_types:
            accepted = await batch.response_accept_late(self.late_types, self.clock())
            for job_id in accepted:
                fields = {"job_id": job_id, "state": "completed", "attempt": None, "error": None}
                committed.append(("job_settled", {"queue": self.name, **fields}))
            if accepted:
                committed.append(
                    ("responses_settled", {"status": "late_accepted", "count": len(accepted)})
                )
        matches, duplicates = await batch.response_match(self.signed_types)
        if duplicates:
            await batch.response_mark([], duplicates, self.clock())
            committed.append(
                ("responses_settled", {"status": "duplicate", "count": len(duplicates)})
            )
        out: dict[int, tuple[int, Outcome]] = {}
        for m in matches:
            if m.job_id in self.in_flight:
                r = m.response
                out[m.job_id] = (r.id, response_outcome(r.succeeded, r.reason, r.body))
        return out

    def _settlements(
        self,
        inbox: _Inbox,
        cancels: list[int],
        now: datetime,
        matched: dict[int, tuple[int, Outcome]] | None = None,
    ) -> list[Settlement]:
        outcomes: dict[int, Outcome] = {}
        for (job_id, attempt), outcome in inbox.outcomes.items():
            job = self.in_flight.get(job_id)
            if job is not None and job.attempt == attempt:  # else: stale, already settled
                outcomes[job_id] = outcome
        # A correlated response wins over what the transport said of the send.
        for job_id, (_response_id, outcome) in (matched or {}).items():
            outcomes[job_id] = outcome
        for job_id in cancels:
            if job_id in self.in_flight:
                outcomes[job_id] = Cancelled()
        for job in self.in_flight.values():
            if job.id not in outcomes and job.deadline is not None and job.deadline <= now:
                if job.id in inbox.deadlines and inbox.deadlines[job.id] > now:
                    continue  # a heartbeat arrived in time
                took = job.timeout_seconds
                outcomes[job.id] = Failed(AttemptError(f"timed out after {took:g}s", "timeout"))
        out = []
        for job_id, outcome in outcomes.items():
            job = self.in_flight[job_id]
            if job_id in inbox.payloads:
                job = job._replace(payload=inbox.payloads[job_id])
            strategy = self._strategy(job)
            out.append(settle(job, outcome, strategy, now))
        return out

    def _strategy(self, job: Job) -> Any:
        try:
            return self.retry.get(job.retry)
        except Exception:  # a config that no longer loads: fall back to the default
            log.exception("job %s: retry config %r does not load", job.id, job.retry)
            return self.retry.get({"strategy": "exponential"})

    def _sent_pairs(self, inbox: _Inbox, settled: list[Settlement]) -> list[tuple[int, int]]:
        done = {s.job_id for s in settled}
        return [
            (i, a)
            for i, a in inbox.sent
            if i not in done and (j := self.in_flight.get(i)) is not None and j.attempt == a
        ]

    def _live(self, items: dict[int, Any], settled: list[Settlement]) -> dict[int, Any]:
        done = {s.job_id for s in settled}
        return {i: v for i, v in items.items() if i in self.in_flight and i not in done}

    async def _admit(
        self, batch: Any, settled: list[Settlement], now: datetime, report: TickReport
    ) -> list[Job]:
        self._held_by_rate = False
        done = {s.job_id for s in settled}
        live = [j for j in self.in_flight.values() if j.id not in done]
        capacity = self.config.concurrency
        in_use = sum(j.weight for j in live)
        if capacity is not None and in_use >= capacity:
            # Full: nothing can be admitted, so do not read (and re-hold) the backlog.
            await self._write_stats(batch, live, Counter(), now)
            return []
        scan, max_weight = self.config.batch_size, None
        if self._scan_free:
            assert capacity is not None
            # Every job weighs at least 1; one heavier than the whole capacity could
            # never run and would only take a place in the read (see acquire).
            scan, max_weight = min(scan, capacity - in_use), capacity
        candidates = await batch.job_due(
            now, scan, self.config.order, self.config.aging, max_weight=max_weight
        )
        report.full = len(candidates) >= self.config.batch_size
        if not candidates:
            await self._write_stats(batch, live, Counter(), now)
            return []
        self._forget_starts(now)
        view = RunningView((_in_flight_view(j) for j in live), tuple(self._starts))
        chain = await self.chain.run(candidates, view, now)
        if report.full and self._groups is not None:
            # More are due than were read: a backlog of one group at the front may
            # hide other groups' jobs. Read the heads of those groups, decide again.
            wanted = self._groups_to_read(candidates, chain.held, view)
            if wanted:
                merged = await self._due_by_group(batch, candidates, wanted, now, scan)
                if len(merged) > len(candidates):
                    candidates = merged
                    chain = await self.chain.run(candidates, view, now)
        report.loaded = len(candidates)
        for stage, message in chain.errors:
            self._errors[stage] += 1
            self.events.emit("throttler_error", queue=self.name, throttler=stage, error=message)
        claimed = await batch.job_claim(chain.admitted, now)
        claimed = await self._dispatch_keys(batch, claimed)
        by_stage: dict[str, dict[int, datetime]] = {}
        for job_id, at in chain.deferred.items():
            by_stage.setdefault(chain.deferred_by.get(job_id, "?"), {})[job_id] = at
        for stage, deferred in by_stage.items():
            reason = "outside its time windows" if stage == "window" else f"deferred by {stage}"
            await batch.job_defer(deferred, reason, now)
        stored = {j.id: j.waiting_reason for j in candidates}
        changed = {i: r for i, r in chain.held.items() if not _same_reason(stored.get(i), r)}
        await batch.job_note_waiting(changed)
        report.admitted, report.held = len(claimed), len(chain.held)
        self._held_by_rate = any(
            s.lookback_seconds > 0 and chain.held_by.get(s.name) for s in self.stages
        )
        report.deferred = len(chain.deferred)
        if self._lookback > 0:
            self._starts.extend(
                Start(at=now, labels=j.labels, critical=j.critical) for j in claimed
            )
        await self._write_stats(batch, live + claimed, chain.held_by, now)
        if chain.held_by:
            self.events.emit("throttled", queue=self.name, held_by=dict(chain.held_by))
        return claimed

    def _groups_to_read(
        self, read: list[Job], held: Mapping[int, str], view: RunningView
    ) -> list[str | None]:
        """Scan groups (a label value; None: every other value) worth reading on
        their own after a full read: those it did not reach, and, when it held jobs,
        those of which it held none (they may have room for more). A group it did
        reach and held jobs of is saturated: more of it would be held too; so is a
        group the throttler says has no room."""
        groups, stage = self._groups, self._group_stage
        assert groups is not None and stage is not None
        room_of = getattr(stage.throttler, "scan_room", None)
        room = None
        if callable(room_of):
            try:
                room = set(
                    room_of(view.without_critical() if stage.lets_critical_through else view)
                )
            except Exception:  # a plugin's bug: read every group rather than none
                log.exception("queue %s: %s.scan_room failed", self.name, stage.name)
        reached: dict[str | None, bool] = {}  # group -> some of its jobs were held
        for job in read:
            group = self._group_of(job)
            reached[group] = reached.get(group, False) or job.id in held
        candidates: list[str | None] = list(groups.values)
        if groups.others:
            candidates.append(None)
        wanted = []
        for group in candidates:
            if room is not None and group not in room:
                continue
            if group not in reached:
                if self._known_empty(group):
                    continue
                wanted.append(group)
            elif held and not reached[group]:
                wanted.append(group)
        return wanted

    def _group_of(self, job: Job) -> str | None:
        groups = self._groups
        assert groups is not None
        value = job.labels.get(groups.label)
        return value if value in groups.values else None

    def _known_empty(self, group: str | None) -> bool:
        """Whether ``group`` had no due jobs a moment ago (within one batch_interval):
        reading it again would scan the whole backlog to find nothing."""
        since = self._empty_groups.get(group)
        return since is not None and time.monotonic() - since < self.config.batch_interval

    async def _due_by_group(
        self,
        batch: Any,
        first: list[Job],
        wanted: list[str | None],
        now: datetime,
        scan: int,
    ) -> list[Job]:
        """The first read plus the first ``scan`` due jobs of each wanted group,
        merged in queue order."""
        groups = self._groups
        assert groups is not None
        order, aging = self.config.order, self.config.aging
        found = {j.id: j for j in first}
        for group in wanted:
            if group is None:
                rows = await batch.job_due(
                    now, scan, order, aging, label=groups.label, other_than=groups.values
                )
            else:
                rows = await batch.job_due(now, scan, order, aging, label=groups.label, value=group)
            if rows:
                self._empty_groups.pop(group, None)
            else:
                self._empty_groups[group] = time.monotonic()
            for job in rows:
                found.setdefault(job.id, job)
        return sorted(found.values(), key=self._queue_order)

    def _queue_order(self, job: Job) -> tuple[Any, ...]:
        """The due scan's ORDER BY, for merging reads in Python."""
        return job_order_key(self.config.order, self.config.aging, job)

    async def _dispatch_keys(self, batch: Any, claimed: list[Job]) -> list[Job]:
        """Build correlation keys that depend on the job's id or attempt."""
        keys: dict[int, str] = {}
        out = []
        for job in claimed:
            template = self.key_templates.get(job.type)
            if template is not None:
                context = {
                    "payload": job.payload,
                    "labels": job.labels,
                    "type": job.type,
                    "id": job.id,
                    "attempt": job.attempt,
                }
                try:
                    keys[job.id] = template.render(context)
                except TemplateError as exc:
                    error = AttemptError(f"correlation key: {exc}", retryable=False)
                    self.outcome(job, Failed(error))
            out.append(job)
        # A key another open job holds would break the unique index and, with it, every
        # tick of the queue: such a job fails instead (its key cannot identify it).
        for job_id, reason in (await batch.job_keys_in_use(keys)).items():
            del keys[job_id]
            job = next(j for j in out if j.id == job_id)
            self.outcome(job, Failed(AttemptError(reason, retryable=False)))
        await batch.job_set_correlation_keys(keys)
        return [j._replace(correlation_key=keys.get(j.id, j.correlation_key)) for j in out]

    def _forget_starts(self, now: datetime) -> None:
        horizon = now - timedelta(seconds=self._lookback)
        while self._starts and self._starts[0].at < horizon:
            self._starts.popleft()

    async def _write_stats(
        self, batch: Any, live: list[Job], held_by: Counter[str], now: datetime
    ) -> None:
        """What an operator sees in GET /v1/queues/{name}; written only when it changes."""
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
        if stats != self._stats:
            await batch.queue_write_stats({**stats, "updated_at": now.isoformat()})
            self._stats = stats

    def _matched_event(
        self, used: list[tuple[int, int]], now: datetime
    ) -> tuple[str, dict[str, Any]]:
        """Responses that settle their jobs this tick, and how long each job waited
        for its response since it was claimed (the external system's turnaround)."""
        waits = []
        for _response_id, job_id in used:
            job = self.in_flight.get(job_id)
            if job is not None and job.claimed_at is not None:
                waits.append(max(0.0, (now - job.claimed_at).total_seconds()))
        fields = {"status": "matched", "count": len(used), "queue": self.name, "waits": waits}
        return ("responses_settled", fields)

    def _apply(
        self, inbox: _Inbox, settled: list[Settlement], claimed: list[Job], now: datetime
    ) -> None:
        """The transaction committed: bring the in-memory view in line with it."""
        # Requests sent, counted before settling: a response can settle its job in
        # the very tick that learns of the send.
        sent = sum(
            1
            for job_id, attempt in inbox.sent
            if (job := self.in_flight.get(job_id)) is not None and job.attempt == attempt
        )
        if sent:
            self.events.emit("jobs_sent", queue=self.name, count=sent)
        for s in settled:
            job = self.in_flight.pop(s.job_id, None)
            if job is not None:
                self._transport_of(job).abandon(job.id)
            self.events.emit(
                "job_settled",
                queue=self.name,
                job_id=s.job_id,
                state=s.state.value,
                attempt=s.attempt,
                error=s.last_error,
            )
        for job_id, attempt in inbox.sent:
            job = self.in_flight.get(job_id)
            if job is not None and job.attempt == attempt and job.state == State.RUNNING:
                self.in_flight[job_id] = job._replace(state=State.AWAITING)
        for job_id, deadline in inbox.deadlines.items():
            if job_id in self.in_flight:
                self.in_flight[job_id] = self.in_flight[job_id]._replace(deadline=deadline)
        for job_id, payload in inbox.payloads.items():
            if job_id in self.in_flight:
                self.in_flight[job_id] = self.in_flight[job_id]._replace(payload=payload)
        for job in claimed:
            self.in_flight[job.id] = job
        if claimed or inbox.sent:
            # A response stored before its job was running or awaiting (early) can
            # match now.
            self._check_responses = True
        if claimed:
            self.events.emit("jobs_admitted", queue=self.name, count=len(claimed))

    def _transport_of(self, job: Job) -> Transport:
        return self.transports.get(job.type) or _UNKNOWN_TYPE

    def _dispatch(self, jobs: list[Job]) -> None:
        for job in jobs:
            if (job.id, job.attempt) in self._inbox.outcomes:
                continue  # it failed at claim (its key): nothing to send
            transport = self.transports.get(job.type)
            if transport is None:
                error = AttemptError(f"unknown job type {job.type!r}", retryable=False)
                self.outcome(job, Failed(error))
                continue
            transport.dispatch(job, self)

    # -- the service around ticks ---------------------------------------------------

    def next_wake(self, now: datetime, next_run_at: datetime | None) -> float:
        """Seconds to sleep: until the tick, the next due job or the next deadline."""
        wake = now + timedelta(seconds=self.config.batch_interval)
        # The lease must be renewed well within its TTL, even on an idle queue.
        wake = min(wake, now + timedelta(seconds=self.lease_ttl / 3))
        if next_run_at is not None:
            wake = min(wake, next_run_at)
        deadlines = [j.deadline for j in self.in_flight.values() if j.deadline is not None]
        if deadlines:
            wake = min(wake, min(deadlines))
        if self._held_by_rate:
            for stage in self.stages:
                if stage.lookback_seconds > 0:
                    window = timedelta(seconds=stage.lookback_seconds)
                    oldest = next((s.at for s in self._starts if s.at > now - window), None)
                    if oldest is not None:
                        # Just after it: the window is (now - per, now].
                        wake = min(wake, oldest + window + _RATE_SLACK)
        return max(0.0, (wake - now).total_seconds())

    async def run(self) -> None:
        """Own the queue when possible and tick until ``stop``."""
        failures = 0
        while not self._stopping:
            try:
                if self.token is None and not await self.acquire():
                    await self._sleep(self.lease_ttl / 3)
                    continue
                report = await self.run_once()
                failures = 0
                # A full read that changed something may have more behind it: go on at
                # once. One whose jobs were all held would read the same jobs again.
                more = report.full and (report.admitted or report.deferred)
                if self.token is None or more or self._inbox.outcomes:
                    continue
                now = self.clock()
                await self._sleep(
                    self.next_wake(now, await self.store.job_next_run_at(self.name, now))
                )
            except asyncio.CancelledError:
                raise
            except Exception:
                failures += 1
                log.exception("queue %s: tick failed (%d in a row)", self.name, failures)
                self.events.emit("tick_failed", queue=self.name)
                await self._sleep(min(30.0, 0.5 * 2 ** min(failures, 6)))

    async def _sleep(self, seconds: float) -> None:
        if self.wake.is_set():
            self.wake.clear()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.wake.wait(), timeout=seconds)
        self.wake.clear()

    def stop(self) -> None:
        self._stopping = True
        self.wake.set()


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


class _UnknownType:
    def abandon(self, job_id: int) -> None:
        return None


_UNKNOWN_TYPE: Any = _UnknownType()
