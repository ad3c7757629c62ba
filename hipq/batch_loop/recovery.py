"""What a queue's loop does besides its normal ticks: draining while the process
stops, and re-reading what it owns after a failed tick.

``QueueLoop`` (``hipq.batch_loop.loop``) keeps the order of a tick; this module says what a
draining loop leaves alone and how memory is brought back in line with the database
when a tick's outcome is unknown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from hipq.backoff import Backoff
from hipq.faults import FaultReporter
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.store import Store

# The wait before re-reading after the n-th failure in a row: 0.5 s doubling, at most 30 s.
RECOVERY_BACKOFF = Backoff(first=0.5, cap=30.0)


@dataclass(slots=True)
class Drain:
    """Draining (the process is stopping): ticks settle what transports report and
    claim nothing; jobs claimed by a tick under way when it was asked still run, and
    due jobs do not wake the loop."""

    requested: bool = False

    @property
    def claims(self) -> bool:
        """Whether a tick may claim (and dispatch) jobs."""
        return not self.requested

    def wake_at(self, next_run_at: datetime | None) -> datetime | None:
        """The next due job's time if it should wake the loop."""
        return None if self.requested else next_run_at


@dataclass(slots=True)
class Reconciled:
    """Memory brought in line with the database after a failed tick."""

    in_flight: dict[int, Job]
    forgotten: list[Job] = field(default_factory=list)  # settled meanwhile: abandon
    to_dispatch: list[Job] = field(default_factory=list)  # claimed meanwhile: send


def reconcile(known: Mapping[int, Job], owned: Mapping[int, Job]) -> Reconciled:
    """A tick whose COMMIT's reply was lost did commit its claims and settlements,
    which memory does not know: what the database says is owned is in flight; jobs
    memory held that are no longer owned are forgotten; jobs running in an attempt
    memory did not know are dispatched."""
    return Reconciled(
        in_flight=dict(owned),
        forgotten=[known[i] for i in known.keys() - owned.keys()],
        to_dispatch=[
            j
            for i, j in owned.items()
            if j.state == State.RUNNING and (i not in known or known[i].attempt != j.attempt)
        ],
    )


async def reread_owned(
    store: Store,
    queue: str,
    failures: int,
    faults: FaultReporter,
    *,
    sleep: Callable[[float], Awaitable[None]],
    stopping: Callable[[], bool],
    owns: Callable[[], bool],
) -> tuple[dict[int, Job] | None, int]:
    """After a failed tick: wait (backing off), then read the jobs ``queue``'s loop
    owns, as at takeover, until a read succeeds. Returns them (None when the loop
    stopped or lost its lease meanwhile) and the failures counted so far."""
    while not stopping():
        await sleep(RECOVERY_BACKOFF.delay(failures))
        if not owns():
            return None, failures
        try:
            return {j.id: j for j in await store.job_in_flight(queue)}, failures
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failures += 1
            faults.failed(exc)
    return None, failures
