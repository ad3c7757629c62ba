"""The batch loop of one queue: the single writer of its in-flight jobs.

Each tick, in one transaction fenced by the queue's lease:
  1. settle the outcomes that transports reported (and timeouts, cancellations),
  2. load due jobs in the queue's order,
  3. run the throttler chain against the in-flight view,
  4. claim what it admits, defer or annotate the rest,
then, after the commit, dispatch the claimed jobs. A job that reached an outcome
in memory is persisted before it is forgotten, and only ever runs again after it
was loaded back from the database.

The loop owns the lease, the order of a tick, the transports' reports and its wake
timing; ``Admission`` decides what starts and ``Correlation`` matches responses.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hipq.activity import Loop
from hipq.batch_loop import crash_recovery
from hipq.batch_loop.admission import Admission
from hipq.batch_loop.chain import GuardedChain
from hipq.batch_loop.correlation import Correlation, Event, Matches, matched_event
from hipq.batch_loop.external_heartbeats import ExternalHeartbeats
from hipq.batch_loop.hand_off import HandOff
from hipq.batch_loop.limits import LiveLimits
from hipq.batch_loop.recovery import Drain, reconcile, reread_owned
from hipq.batch_loop.reports import Reports, apply_reports, write_reports
from hipq.config import QueueConfig
from hipq.events import Events
from hipq.job_types import JobTypes
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.outcomes import Outcome, Settlement, Succeeded
from hipq.plugins import RetryStrategies
from hipq.store import LeaseLost, Store
from hipq.store.requests import Requests, requests_pending
from hipq.throttling import Stage, feed_back
from hipq.transports.base import Transport, dispatch

log = logging.getLogger("hipq.batch_loop.loop")

Clock = Callable[[], datetime]
RECHECK_SECONDS = 2.0
# A paused queue ticks at most this often however many wake-ups arrive (a new job's
# does not wake it at all: ``hint_jobs``), and a paused loop's tick (a fenced write)
# would only see it is paused. Unpausing takes effect within this time.
PAUSED_TICK_SECONDS = 0.05


class Unread(enum.Enum):
    UNREAD = "unread"


@dataclass(slots=True)
class TickReport:
    settled: int = 0
    admitted: int = 0
    held: int = 0
    deferred: int = 0
    loaded: int = 0
    full: bool = False  # the due scan filled a whole batch: more may be waiting
    # The next scheduled job after the tick's now, read in the tick's transaction when
    # it claimed nothing or also settled jobs; ``UNREAD`` when it only claimed (read
    # after the dispatch instead, so that a new job's handler does not wait for it).
    next_run_at: datetime | Unread | None = Unread.UNREAD


class QueueLoop(Loop):
    """One queue's loop; a ``Loop`` whose step owns the queue's lease when it can and
    ticks, resting until the next tick, due job or deadline (``next_wake``)."""

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
        job_types: JobTypes | None = None,
        events: Events | None = None,
        lease_ttl: float = 15.0,
        limits: LiveLimits | None = None,
        hand_back_grace: float = 25.0,
    ) -> None:
        super().__init__(log, f"queue {name}", config.batch_interval)
        self.name, self.config, self.store = name, config, store
        self.owner, self.stages, self.transports = owner, list(stages), transports
        self.retry, self.clock = retry, clock
        self.events = events or Events()
        self.lease_ttl = lease_ttl
        self.job_types = job_types or JobTypes({})
        self.correlation = Correlation(name, self.job_types, clock)
        self.heartbeats = ExternalHeartbeats(self.job_types)
        self.admission = Admission(name, config, self.stages, self.events)
        self.limits = limits  # an operator's overrides, read with operators' requests
        self.token: int | None = None
        self.in_flight: dict[int, Job] = {}
        self._reports = Reports()
        self._drain = Drain()
        # Cancel requests and inbox responses are looked for when something hinted at
        # them, and at least every RECHECK_SECONDS (a hint from another process may be
        # lost while its LISTEN connection reconnects).
        self._check_cancels = self._check_responses = True
        self._last_recheck = time.monotonic()
        self._ticking = False
        self._paused_since_tick: float | None = None  # when a tick last found it paused
        # Whether a tick that only claims may claim in its due scan (``_only_claims``):
        # not while due jobs wait that the chain holds (a forbidden flag).
        self._scan_claims = True
        # Whether this process's share of the queues includes this one
        # (``hipq.process.registry``); a loop not assigned takes no lease and hands
        # back the one it holds once none of its jobs is running, or after
        # ``hand_back_grace`` seconds.
        self.assigned = True
        self.hand_back_grace = hand_back_grace
        self._handing_back_since: float | None = None
        # Jobs found running at a takeover, sent again once a tick has matched the
        # inbox (``acquire``): job id -> attempt.
        self._resume_after_match: dict[int, int] = {}
        # Who sends the claimed jobs when other live processes serve the queue too
        # (``hipq.batch_loop.hand_off``); alone, the loop sends them all itself.
        self.hand_off = HandOff(owner, keep_below=config.hand_off_above)

    @property
    def chain(self) -> GuardedChain:
        return self.admission.chain

    # -- what transports call (through the Reporter protocol) ---------------------

    def outcome(self, job: Job, outcome: Outcome) -> None:
        self._reports.outcomes.setdefault((job.id, job.attempt), outcome)
        feed_back(self.stages, job, outcome, self.clock)
        self.wake.set()

    def sent(self, job: Job) -> None:
        self._reports.sent.add((job.id, job.attempt))
        feed_back(self.stages, job, None, self.clock)
        self.wake.set()

    def heartbeat(self, job: Job, deadline: datetime) -> None:
        if job.id in self.in_flight:
            self._reports.deadlines[job.id] = deadline

    def checkpoint(self, job: Job, payload: dict[str, Any]) -> None:
        if job.id in self.in_flight:
            self._reports.payloads[job.id] = payload

    def hint_jobs(self) -> None:
        """New or changed jobs in the queue. A paused queue admits none, and every
        insert sends this: its tick would only find it paused again (a resume wakes it
        through ``hint_cancels``, and its ticks go on at their interval)."""
        if self.token is not None and self._paused_since_tick is not None:
            return
        self.wake.set()

    def hint_cancels(self) -> None:
        self._check_cancels = True
        self.wake.set()

    def hint_responses(self) -> None:
        self._check_responses = True
        self.wake.set()

    def hint_reports(self) -> None:
        """An executor stored reports of this queue's jobs."""
        self.hand_off.unread = True
        self.wake.set()

    def serve_with(self, executors: Sequence[str], live: Sequence[str]) -> None:
        """The registry's latest beat: the live processes that serve this queue (they
        may be handed its claimed jobs) and every live process."""
        if self.hand_off.serve_with(executors, live):
            self.wake.set()  # a sender left: its jobs are sent again after its reports

    def _recheck_due(self) -> bool:
        if time.monotonic() - self._last_recheck >= RECHECK_SECONDS:
            self._last_recheck = time.monotonic()
            self._check_cancels = self._check_responses = True
            # A NOTIFY lost while a LISTEN connection reconnected.
            self.hand_off.unread = self.hand_off.unread or bool(self.hand_off.handed)
        return self._check_cancels or self._check_responses

    # -- ownership ------------------------------------------------------------------

    async def acquire(self) -> bool:
        """Take the queue's lease if free; then reload and resume its in-flight jobs."""
        token = await self.store.lease_acquire(self.name, self.owner, self.clock(), self.lease_ttl)
        if token is None:
            return False
        self.token = token
        self.in_flight = {j.id: j for j in await self.store.job_in_flight(self.name)}
        self._reports = Reports()
        await self._pick_up_limits(self.clock(), resume=False)
        await self.admission.resume(self.store, self.clock())
        # Jobs a previous owner handed over stay with their executors; those of an
        # executor that is gone are sent again once the first tick has read the
        # reports (a "sent" one stored before it died is not sent twice).
        await self._read_handed()
        # After a crash, `running` jobs may or may not have sent their request: send again
        # (at-least-once). `awaiting` jobs keep waiting for their response until the deadline.
        # Each job type chooses: again at once, or after its retry strategy's delay.
        running = self.hand_off.own(j for j in self.in_flight.values() if j.state == State.RUNNING)
        self.events.emit("lease_acquired", queue=self.name, token=token, resumed=len(running))
        if self.correlation.active:
            # A response stored while nobody owned the queue (its callback came after the
            # owner died, before its "sent" was written) settles its job at the first
            # tick, which looks in the inbox before anything is sent again: a job sent
            # once and answered is not sent twice, nor does its stored answer free its
            # capacity while a second request is still at the receiver.
            self._check_responses = True
            self._resume_after_match = {j.id: j.attempt for j in running}
        else:
            self._resume(running)
        return True

    def _resume(self, running: list[Job]) -> None:
        """Send again jobs found ``running`` that nobody sends any more: at once, or as
        an interrupted attempt, as their job type chooses (``crash_recovery``)."""
        resumed, interrupted = crash_recovery.resumed(running, self.job_types)
        self._dispatch(resumed)
        for job, outcome in interrupted:
            self.outcome(job, outcome)

    def _resume_unanswered(self) -> None:
        """After the takeover's first look in the inbox: send again the jobs found
        running that it did not settle (still running, same attempt, sent by nobody else)."""
        waiting, self._resume_after_match = self._resume_after_match, {}
        running = [
            job
            for job_id, attempt in waiting.items()
            if (job := self.in_flight.get(job_id)) is not None
            and job.attempt == attempt
            and job.state == State.RUNNING
        ]
        self._resume(self.hand_off.own(running))

    async def _read_handed(self) -> None:
        """Which running jobs another process was handed to send, and a look at the
        reports at the next tick (one read each per takeover, not per job: a previous
        owner may have handed jobs over even where this one is alone now)."""
        handed = await self.store.job_executors(self.name)
        # One handed to this very process is sent by its executor, which reports it
        # through the table as any other would.
        self.hand_off.handed = {i: who for i, who in handed.items() if i in self.in_flight}
        self.hand_off.unread = True

    def assign(self, assigned: bool) -> None:
        """This process's share now includes the queue (take its lease when free) or
        not (hand it back)."""
        if assigned == self.assigned:
            return
        self.assigned = assigned
        self._handing_back_since = None if assigned else time.monotonic()
        self.wake.set()

    async def hand_back_if_done(self) -> bool:
        """Release the lease of a queue handed back once nothing of it is running here
        (awaiting jobs need no sender: the next owner waits for their responses), or
        after the grace; whether it was released."""
        if self.token is None or self.assigned:
            return False
        since = self._handing_back_since or time.monotonic()
        own = self.hand_off.own(self.in_flight.values())
        running = any(j.state == State.RUNNING for j in own)
        if (running or self.settling) and time.monotonic() - since < self.hand_back_grace:
            return False
        token = self.token
        for job in self.in_flight.values():
            self._transport_of(job).abandon(job.id)
        self.in_flight, self._reports = {}, Reports()
        self.hand_off.handed, self._resume_after_match = {}, {}
        await self.store.lease_release(self.name, self.owner, token)
        self.token = None
        self.events.emit("lease_handed_back", queue=self.name, token=token)
        return True

    def _lose_lease(self) -> None:
        self.events.emit("lease_lost", queue=self.name, token=self.token)
        for job_id in list(self.in_flight):
            self._transport_of(self.in_flight[job_id]).abandon(job_id)
        self.token, self.in_flight, self._reports = None, {}, Reports()
        self.hand_off.handed, self._resume_after_match = {}, {}

    async def release(self) -> None:
        if self.token is not None:
            await self.store.lease_release(self.name, self.owner, self.token)
            self.token = None

    # -- one tick -------------------------------------------------------------------

    async def run_once(self) -> TickReport:
        """One tick; the caller must own the lease (``acquire``)."""
        if self.token is None:
            raise RuntimeError(f"queue {self.name}: run_once without the lease")
        self._ticking = True
        try:
            return await self._tick(self.token)
        finally:
            self._ticking = False

    async def _tick(self, token: int) -> TickReport:
        now = self.clock()
        # Before the reports are taken: a read that fails here leaves them for the next tick.
        if self._recheck_due() and self._check_cancels:
            await self._pick_up_limits(now, resume=True)
        if self._only_claims(now):
            return await self._claim_at_scan(token, now)
        reports, self._reports = self._reports, Reports()
        report = TickReport()
        # Events of what the tick writes: emitted once its transaction has committed.
        committed: list[Event] = []
        self._recheck_due()
        # The live processes as known before this tick reads executors' reports: a job
        # handed to one no longer among them, still running after them, is sent again.
        alive, took_reports = self.hand_off.live, self.hand_off.unread
        self.hand_off.unread = False  # a hint during the tick is for the next one
        handed: dict[int, str] = {}
        # What the tick looks for is decided with where its fence goes, before it waits
        # for the write lock (SQLite): a hint arriving meanwhile is for the next tick, or
        # this one would read before a fence it chose to send later.
        fence_later = self._fence_later(reports, now)
        check_cancels, matched_inbox = self._check_cancels, self._check_responses
        self._check_cancels = self._check_responses = False
        try:
            async with self.store.queue_batch(
                self.name,
                self.owner,
                token,
                now,
                self.lease_ttl,
                fence_later=fence_later,
            ) as batch:
                cancels: Requests = {}  # operators' requests (hipq.operator_requests)
                # Heartbeats of external jobs are hinted and rechecked with cancels.
                await self.heartbeats.take(batch, self.in_flight, reports, check_cancels, now)
                if check_cancels:
                    cancels = await requests_pending(batch)
                matched: Matches = {}
                if matched_inbox:
                    matched = await self.correlation.match(batch, self.in_flight, committed)
                if took_reports:
                    rows = await batch.report_take()
                    self.hand_off.take(rows, reports, self.in_flight, self.stages, self.clock)
                settled, used = await write_reports(
                    batch, reports, self.in_flight, cancels, matched, self.retry, now
                )
                if used:
                    committed.append(matched_event(self.name, used, self.in_flight, now))
                claimed: list[Job] = []
                done = {s.job_id for s in settled}
                live = [j for j in self.in_flight.values() if j.id not in done]
                if not batch.paused and self._drain.claims and self.assigned:
                    admitted = await self.admission.admit(batch, live, now)
                    claimed = await self.correlation.dispatch_keys(
                        batch, admitted.claimed, self.outcome
                    )
                    handed = self.hand_off.choose(self._to_send(claimed), self.in_flight)
                    if handed:
                        await batch.job_hand_off(handed)
                    report.admitted, report.held = len(claimed), admitted.held
                    # The chain held none: the next tick that only claims may claim in
                    # its due scan again (``_claim_at_scan``).
                    self._scan_claims = not admitted.held
                    report.deferred, report.loaded = admitted.deferred, admitted.loaded
                    report.full = admitted.full
                # With the fence sent along with the due scan, paused is known only now.
                self._paused_since_tick = time.monotonic() if batch.paused else None
                if batch.paused and self.assigned:
                    await self.admission.hold_paused(batch, live, now)
                if not claimed or settled or batch.knows_next_run_at(now):
                    # A tick that only claimed (a new job on an idle queue) reads it
                    # after the dispatch, unless its due scan read it along; a busy
                    # one here, saving a transaction.
                    report.next_run_at = await batch.job_next_run_at(now)
        except LeaseLost:
            self._lose_lease()
            return report
        except Exception:
            self._reports, fresh = reports, self._reports
            self._reports.merge_back(fresh)
            self._check_cancels = self._check_responses = True  # look again next tick
            self.hand_off.unread = self.hand_off.unread or took_reports
            raise
        for name, fields in committed:
            self.events.emit(name, **fields)
        self.hand_off.handed.update(handed)
        self._apply(reports, settled, claimed)
        report.settled = len(settled)
        # Also when a drain was asked for while this tick ran: the jobs are claimed, and
        # left undispatched they stayed `running` after a graceful stop, to be run again
        # by the next owner as if cut off. The drain waits for them (``ticking``).
        self._dispatch(self.hand_off.own(claimed))
        if self._resume_after_match and matched_inbox:
            self._resume_unanswered()
        if took_reports and self.hand_off.handed:
            # A process that joined during the tick and was handed jobs by it is live.
            alive |= frozenset(handed.values())
            self._resume(self.hand_off.orphans(self.in_flight, alive))
        return report

    def _only_claims(self, now: datetime) -> bool:
        """Whether this tick would only claim (a wake-up for a new job: nothing
        reported, nothing to look for, capacity free; the fence would go with the due
        scan) on a queue whose chain admits every due job without windows or flags, and
        the store claims in its due scan (PostgreSQL): then it does, in one statement."""
        return (
            self._scan_claims
            and self.store.dialect.claims_at_scan
            and self.admission.claims_at_scan
            and not self.correlation.key_templates
            and self.assigned
            and self.hand_off.keeps(self.in_flight, 1) > 0
            and not self.hand_off.unread
            and not self._reports.outcomes
            and self._fence_later(self._reports, now)
        )

    async def _claim_at_scan(self, token: int, now: datetime) -> TickReport:
        """A tick that only claims, as one statement (``Store.queue_claim_due``): the
        fence, the due scan and the claim commit together before any job is sent, as in
        a tick's transaction, in one round trip instead of four (BEGIN, the fenced scan,
        the claim, COMMIT): the path from a new job's commit to its send. With other
        processes serving the queue it claims only what the owner sends itself
        (``HandOff.keeps``): a hand-off is written with its claim, in a tick."""
        limit = self.hand_off.keeps(self.in_flight, self.config.batch_size)
        try:
            read = await self.store.queue_claim_due(
                self.name,
                self.owner,
                token,
                now,
                self.lease_ttl,
                limit=limit,
                order=self.config.order,
                aging=self.config.aging,
            )
        except LeaseLost:
            self._lose_lease()
            return TickReport()
        if read is None:  # the dialect has no such statement
            self._scan_claims = False
            return await self._tick(token)
        if read.queue_row[0]:
            # Paused (it claimed nothing): a whole tick counts what the pause holds.
            self._scan_claims = False
            return await self._tick(token)
        self._paused_since_tick = None
        admitted = self.admission.admitted_at_scan(read.claimed, read.read)
        claimed = admitted.claimed
        self.correlation.keys_of(claimed, self.outcome)  # none built here: checked only
        self._apply(Reports(), [], claimed)
        self._dispatch(claimed)
        # More may be due than the owner keeps (``keeps`` cut the scan short).
        cut_short = limit < self.config.batch_size and read.read >= limit
        if read.read > len(claimed) or cut_short:
            # Due jobs with windows or flags, or more than the owner keeps: the chain
            # decides on them, or they are handed over, in a whole tick now.
            self._scan_claims = False
            report = await self._tick(token)
            report.admitted += len(claimed)
            return report
        return TickReport(
            admitted=len(claimed),
            loaded=read.read,
            full=admitted.full,
            next_run_at=read.next_run_at,
        )

    async def _pick_up_limits(self, now: datetime, *, resume: bool) -> None:
        """Limits an operator changed (hipq.batch_loop.limits), looked for with operators'
        requests and at a takeover: the chain rebuilt before a tick admits by it, and
        resumed as at a takeover (start history, oversized jobs)."""
        if self.limits is None:
            return
        changed = self.limits.take(await self.store.queue_limits(self.name))
        if changed is None:
            return
        self.admission.chain.close()
        self.config, self.stages = changed
        self.hand_off.keep_below = self.config.hand_off_above
        self.admission = Admission(self.name, self.config, self.stages, self.events)
        if resume:
            await self.admission.resume(self.store, now)
        self.events.emit("queue_limits_applied", queue=self.name)

    def _fence_later(self, reports: Reports, now: datetime) -> bool:
        """Whether the tick's first statement is the settle of jobs that succeeded, or
        the due scan (a wake-up for a new job): nothing else reported, nothing to look
        for, no deadline passed. The lease fence can go with either."""
        live = self.in_flight.values()
        if (
            reports.sent
            or reports.deadlines
            or reports.payloads
            or self._check_cancels
            or (self._check_responses and self.correlation.active)
            or any(j.deadline is not None and j.deadline <= now for j in live)
        ):
            return False
        if reports.outcomes:
            # Other outcomes may read first (a retry's stored settings, a snooze).
            return all(type(o) is Succeeded for o in reports.outcomes.values())
        return self._drain.claims and self.admission.scans(live)

    def _apply(self, reports: Reports, settled: list[Settlement], claimed: list[Job]) -> None:
        """The transaction committed: bring the in-memory view in line with it."""
        sent, ended = apply_reports(self.in_flight, reports, settled, claimed)
        if sent:
            self.events.emit("jobs_sent", queue=self.name, count=sent)
        self.hand_off.forget(j.id for j in ended)
        for job in ended:
            self._transport_of(job).abandon(job.id)
        for s in settled:
            self.events.emit("job_settled", queue=self.name, **s.event_fields())
        if claimed or reports.sent:
            # A response stored before its job was running or awaiting (early) can
            # match now.
            self._check_responses = True
        if claimed:
            self.events.emit("jobs_admitted", queue=self.name, count=len(claimed), jobs=claimed)

    def _transport_of(self, job: Job) -> Transport:
        return self.transports.get(job.type) or _UNKNOWN_TYPE

    def _to_send(self, jobs: list[Job]) -> list[Job]:
        """Of jobs just claimed, those to send: not one that failed at claim (its key)."""
        return [j for j in jobs if (j.id, j.attempt) not in self._reports.outcomes]

    def _dispatch(self, jobs: list[Job]) -> None:
        for job in self._to_send(jobs):
            dispatch(self.transports, job, self)

    # -- the service around ticks ---------------------------------------------------

    async def _next_run_at(self, report: TickReport, now: datetime) -> datetime | None:
        if report.admitted:
            # The tick dispatched jobs: let their handlers start before this read's
            # (or the next tick's) connection checkout and BEGIN run on the event loop.
            await asyncio.sleep(0)
        if isinstance(report.next_run_at, Unread):
            return await self.store.job_next_run_at(self.name, now)
        return report.next_run_at

    def next_wake(self, now: datetime, next_run_at: datetime | None) -> float:
        """Seconds to sleep: until the tick, the next due job or the next deadline."""
        wake = now + timedelta(seconds=self.config.batch_interval)
        # The lease must be renewed well within its TTL, even on an idle queue.
        wake = min(wake, now + timedelta(seconds=self.lease_ttl / 3))
        next_run_at = self._drain.wake_at(next_run_at)
        if next_run_at is not None:
            wake = min(wake, next_run_at)
        deadlines = [j.deadline for j in self.in_flight.values() if j.deadline is not None]
        if deadlines:
            wake = min(wake, min(deadlines))
        rate = self.admission.rate_wake(now)
        if rate is not None:
            wake = min(wake, rate)
        return max(0.0, (wake - now).total_seconds())

    @property
    def task_name(self) -> str:
        return f"hipq-loop-{self.name}"

    async def turn(self) -> float | None:
        """Own the queue when possible, then tick; how long to rest after."""
        if self.token is None and (
            self._drain.requested or not self.assigned or not await self.acquire()
        ):
            return self.lease_ttl / 3
        report = await self.run_once()
        if await self.hand_back_if_done():
            return None
        # A full read that changed something may have more behind it: go on at
        # once. One whose jobs were all held would read the same jobs again.
        more = report.full and (report.admitted or report.deferred)
        if self.token is None or more or self._reports.outcomes:
            return None
        now = self.clock()
        return self.next_wake(now, await self._next_run_at(report, now))

    async def after_failure(self, exc: Exception) -> float | None:
        self.events.emit("tick_failed", queue=self.name)
        await self._reload_after_failure()
        return None  # the reload rested, backing off

    async def _reload_after_failure(self) -> None:
        """After a failed tick, take what this loop owns from the database
        (``hipq.batch_loop.recovery``): newly claimed jobs are dispatched, settled ones
        forgotten."""
        owned, _failures = await reread_owned(
            self.store,
            self.name,
            self.faults.failures,
            self.faults,
            sleep=self.rest,
            stopping=lambda: self.stopping,
            owns=lambda: self.token is not None,
        )
        if owned is not None:
            now = reconcile(self.in_flight, owned)
            self.in_flight = now.in_flight
            for job in now.forgotten:
                self._transport_of(job).abandon(job.id)
            # A commit whose reply was lost may have handed jobs over too.
            await self._read_handed()
            self._dispatch(self.hand_off.own(now.to_dispatch))

    async def rest(self, seconds: float) -> None:
        await super().rest(seconds)
        await self._paused_wait()

    async def _paused_wait(self) -> None:
        """Hold a paused queue's next tick back to PAUSED_TICK_SECONDS after its last."""
        if self._paused_since_tick is None or self.stopping or self._reports.outcomes:
            return
        rest = PAUSED_TICK_SECONDS - (time.monotonic() - self._paused_since_tick)
        if rest > 0:
            await asyncio.sleep(rest)

    async def starting(self) -> None:
        self._drain = Drain()

    def request_drain(self) -> None:
        """Claim nothing from now on; keep ticking to settle what is in flight."""
        self._drain.requested = True
        self.wake.set()

    @property
    def draining(self) -> bool:
        return self._drain.requested

    @property
    def ticking(self) -> bool:
        """A tick is under way: what it claims is dispatched when it ends."""
        return self._ticking

    @property
    def settling(self) -> bool:
        """Transports reported something that no tick has taken yet."""
        return bool(self._reports.outcomes or self._reports.sent)


class _UnknownType:
    def abandon(self, job_id: int) -> None:
        return None


_UNKNOWN_TYPE: Any = _UnknownType()
