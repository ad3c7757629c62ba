"""Jobs as a reader is shown them: a scheduled job says why it waits, whatever the
cause (``hipq.waiting``), with one read of its queues' rows for a page of jobs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from hipq import waiting
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.store import Store


async def explained(store: Store, clock: Callable[[], datetime], found: Sequence[Job]) -> list[Job]:
    """``found`` with each scheduled job's ``waiting_reason`` saying why it waits; a
    page without a due scheduled job costs no read."""
    now = clock()
    due = {
        j.queue
        for j in found
        if j.state is State.SCHEDULED and not j.waiting_for and j.run_at <= now
    }
    reasons = await store.queue_wait_reasons(due, now) if due else {}
    return [waiting.explained(j, reasons.get(j.queue), now) for j in found]


def as_created(job: Job, now: datetime) -> Job:
    """A job as its POST answers it: the reason a reader would be shown where no read
    is needed (it waits for other jobs, its windows or its run_at); a due job's reason
    is its queue's, which only a read tells (``explained``), so it is left as stored."""
    if job.state is State.SCHEDULED and not job.waiting_for and job.run_at <= now:
        return job
    return waiting.explained(job, None, now)
