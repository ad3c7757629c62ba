"""The owner's side of a hot queue's sends spread over the processes.

A queue's owner keeps admission (the due read, the throttler chain, the claim), so
every limit stays exact; what a claimed job costs after its claim (the HTTP send,
the Kafka produce, a python handler) may run in any live process that serves the
queue. ``HandOff`` chooses who sends each claimed job (least loaded first, the owner
included), turns what executors reported (``hipq_reports``) into the loop's
``Reports``, and finds the jobs whose executor died, which the owner sends again.

With no other live process serving the queue it hands nothing over: no column, row
or NOTIFY is written, and the loop dispatches in memory as it always did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from hipq.batch_loop import outcome_wire
from hipq.batch_loop.reports import Reports
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.store.hand_off import Report
from hipq.throttling import Stage, feed_back

log = logging.getLogger("hipq.batch_loop.hand_off")


@dataclass(slots=True)
class HandOff:
    me: str
    # The owner keeps sending while it has fewer than this many of the queue's jobs
    # running (``QueueConfig.hand_off_above``).
    keep_below: int = 0
    # The live processes that may serve the queue, this one included (the registry's
    # last beat); only these are handed new jobs.
    executors: tuple[str, ...] = ()
    # Every live process: a job handed to one that is not is sent again by the owner.
    live: frozenset[str] = frozenset()
    # Jobs in flight that another process sends: job id -> that process.
    handed: dict[int, str] = field(default_factory=dict)
    # Whether executors may have reported something the owner has not taken yet.
    unread: bool = False

    @property
    def alone(self) -> bool:
        return all(e == self.me for e in self.executors)

    def serve_with(self, executors: Iterable[str], live: Iterable[str]) -> bool:
        """The registry's latest beat; whether a process sending jobs of this queue
        left (the owner then reads the reports before sending those jobs again)."""
        self.executors = tuple(sorted(set(executors) | {self.me}))
        self.live = frozenset(live) | {self.me}
        gone = any(e not in self.live for e in self.handed.values())
        self.unread = self.unread or gone
        return gone

    def choose(self, claimed: Sequence[Job], in_flight: Mapping[int, Job]) -> dict[int, str]:
        """Who sends each claimed job, job id -> process, for those not sent by the
        owner: the owner itself while it has fewer than ``keep_below`` running, then
        the process with the fewest of the queue's jobs running, in turn."""
        if self.alone or not claimed:
            return {}
        load = dict.fromkeys(self.executors, 0)
        for job in in_flight.values():
            if job.state == State.RUNNING:
                who = self.handed.get(job.id, self.me)
                if who in load:
                    load[who] += 1
        out: dict[int, str] = {}
        for job in claimed:
            if load.get(self.me, self.keep_below) < self.keep_below:
                load[self.me] += 1
                continue
            who = min(load, key=lambda e: (load[e], e))
            load[who] += 1
            if who != self.me:
                out[job.id] = who
        return out

    def keeps(self, in_flight: Mapping[int, Job], most: int) -> int:
        """How many jobs claimed now ``choose`` would leave all to the owner, at most
        ``most``: all alone, else the room below ``keep_below``."""
        if self.alone:
            return most
        running = sum(
            1
            for job in in_flight.values()
            if job.state == State.RUNNING and self.handed.get(job.id, self.me) == self.me
        )
        return max(0, min(most, self.keep_below - running))

    def own(self, jobs: Iterable[Job]) -> list[Job]:
        """Of ``jobs``, those the owner sends itself."""
        return [j for j in jobs if j.id not in self.handed]

    def forget(self, ids: Iterable[int]) -> None:
        for job_id in ids:
            self.handed.pop(job_id, None)

    def orphans(self, in_flight: Mapping[int, Job], live: frozenset[str]) -> list[Job]:
        """Running jobs handed to a process no longer live (``live``: as known before
        the tick that read their reports): the owner sends them again, same attempt
        (at-least-once, as after a crash); it forgets they were handed."""
        found = [
            job
            for job_id, who in self.handed.items()
            if who not in live
            and (job := in_flight.get(job_id)) is not None
            and job.state == State.RUNNING
        ]
        self.forget([j.id for j in found])
        return found

    def take(
        self,
        rows: Sequence[Report],
        into: Reports,
        in_flight: Mapping[int, Job],
        stages: Sequence[Stage],
        clock: Callable[[], datetime],
    ) -> None:
        """Executors' reports of the current attempts, as if this process's transports
        had made them; throttlers get their feedback now (one tick later than in a
        single process). Reports of a stale attempt change nothing."""
        for row in rows:
            job = in_flight.get(row.job_id)
            if job is None or job.attempt != row.attempt:
                continue
            key = (job.id, job.attempt)
            if row.kind == "sent":
                into.sent.add(key)
                feed_back(stages, job, None, clock)
            elif row.kind == "outcome":
                try:
                    outcome = outcome_wire.decode(row.body)
                except (ValueError, TypeError):
                    log.exception("job %s: a report's outcome does not decode", job.id)
                    continue
                into.outcomes.setdefault(key, outcome)
                feed_back(stages, job, outcome, clock)
            elif row.kind == "heartbeat" and row.deadline is not None:
                into.deadlines[job.id] = row.deadline
            elif row.kind == "checkpoint" and isinstance(row.body, dict):
                into.payloads[job.id] = row.body
