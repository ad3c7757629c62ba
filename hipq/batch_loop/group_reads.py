"""Extra reads of due jobs by scan group, for a stage that judges groups apart (share).

When a tick's read of due jobs comes back full, a held backlog of one group at the
front of the queue may hide the jobs of the others behind it: the admission then
reads the heads of the groups worth reading and decides again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import datetime

from hipq.config import QueueConfig
from hipq.jobs import Job
from hipq.queue_order import job_order_key
from hipq.store import QueueBatch
from hipq.throttling import RunningView, ScanGroups, Stage

log = logging.getLogger("hipq.batch_loop.loop")


class GroupReads:
    def __init__(self, queue: str, config: QueueConfig, stage: Stage) -> None:
        assert stage.scan_groups is not None
        self.queue, self.config, self.stage = queue, config, stage
        self.groups: ScanGroups = stage.scan_groups
        self._empty: dict[str | None, float] = {}  # group -> when found empty

    def wanted(
        self, read: list[Job], held: Mapping[int, str], view: RunningView
    ) -> list[str | None]:
        """Scan groups (a label value; None: every other value) worth reading on
        their own after a full read: those it did not reach, and, when it held jobs,
        those of which it held none (they may have room for more). A group it did
        reach and held jobs of is saturated: more of it would be held too; so is a
        group the throttler says has no room."""
        groups, stage = self.groups, self.stage
        room = None
        if stage.scan_room is not None:
            seen = view.without_critical() if stage.lets_critical_through else view
            try:
                groups_with_room = stage.scan_room(seen)
                room = None if groups_with_room is None else set(groups_with_room)
            except Exception:  # a plugin's bug: read every group rather than none
                log.exception("queue %s: %s.scan_room failed", self.queue, stage.name)
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
        value = job.labels.get(self.groups.label)
        return value if value in self.groups.values else None

    def _known_empty(self, group: str | None) -> bool:
        """Whether ``group`` had no due jobs a moment ago (within one batch_interval):
        reading it again would scan the whole backlog to find nothing."""
        since = self._empty.get(group)
        return since is not None and time.monotonic() - since < self.config.batch_interval

    async def read(
        self,
        batch: QueueBatch,
        first: list[Job],
        wanted: list[str | None],
        now: datetime,
        scan: int,
    ) -> list[Job]:
        """The first read plus the first ``scan`` due jobs of each wanted group,
        merged in queue order."""
        groups = self.groups
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
                self._empty.pop(group, None)
            else:
                self._empty[group] = time.monotonic()
            for job in rows:
                found.setdefault(job.id, job)
        # The due scan's ORDER BY, for merging reads in Python.
        return sorted(found.values(), key=lambda job: job_order_key(order, aging, job))
