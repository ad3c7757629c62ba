"""Heartbeats of external jobs, taken into a queue's tick.

An external system that needs long shows it is alive with
``POST /v1/callbacks/{key}/heartbeat`` (``hipq.api.callbacks``); the API stores the
heartbeat (``hipq.store.heartbeats``) and hints the queue's loop. The loop, the only
writer of its jobs in flight, takes the pending heartbeats here and turns each into
a new deadline the way a python handler's ``heartbeat()`` does: through the tick's
reports, which settle, persist and apply deadlines in one place
(``hipq.batch_loop.reports``); a checkpoint sent with it becomes the job's payload
the way a handler's ``checkpoint()`` does. A job that hears nothing until its
deadline fails its attempt with a timeout, and its retry strategy decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from hipq.batch_loop.reports import Reports
from hipq.job_types import JobTypes
from hipq.jobs import Job
from hipq.store import QueueBatch
from hipq.store.heartbeats import heartbeat_take


class ExternalHeartbeats:
    def __init__(self, job_types: JobTypes) -> None:
        # Without a job type that takes heartbeats, a tick does no work for them.
        self.active = any(t.takes_heartbeats for t in job_types.values())

    async def take(
        self,
        batch: QueueBatch,
        in_flight: Mapping[int, Job],
        reports: Reports,
        hinted: bool,
        now: datetime,
    ) -> int:
        """Put the pending heartbeats' deadlines into this tick's ``reports``; returns
        how many applied. Read when hinted (a heartbeat was stored, or the loop's
        periodic recheck), and always before a deadline passes: a heartbeat whose hint
        was lost must still save its job."""
        if not self.active or not (hinted or _overdue(in_flight, now)):
            return 0
        applied = 0
        for beat in await heartbeat_take(batch):
            job = in_flight.get(beat.job_id)
            if job is not None and job.attempt == beat.attempt:
                reports.deadlines[job.id] = beat.deadline
                if beat.checkpoint is not None:  # as a python handler's checkpoint()
                    reports.payloads[job.id] = beat.checkpoint
                applied += 1
        return applied


def _overdue(in_flight: Mapping[int, Job], now: datetime) -> bool:
    return any(j.deadline is not None and j.deadline <= now for j in in_flight.values())
