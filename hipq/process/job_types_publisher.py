"""Publishing the config's job types and queues to the database at start.

What a job added inside an application's own transaction is checked against
(``hipq.transactional``, the SQL function ``hipq_add_job``): each starting process
writes its config's job types and queues (``hipq.store.job_types_mirror``), so the
database holds the config of the process that started last. Every process of a
deployment should run the same config; when one replaces rows that another wrote
differently, it says so in a warning naming them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from hipq.config import Settings
from hipq.job_types import JobTypes
from hipq.store import Store
from hipq.store.job_types_mirror import MirroredJobType, MirroredQueue
from hipq.templates import KeyTemplate, Placeholder

log = logging.getLogger("hipq.job_types")


def key_parts(template: KeyTemplate) -> list[dict[str, object]]:
    """A compiled key template as the SQL function renders it."""
    return [
        {"path": list(p.path), "name": p.text} if isinstance(p, Placeholder) else {"text": p}
        for p in template.parts
    ]


def mirror_of(
    settings: Settings, job_types: JobTypes
) -> tuple[list[MirroredJobType], list[MirroredQueue]]:
    types = [
        MirroredJobType(
            name=info.name,
            queue=info.config.queue,
            priority=info.config.priority,
            weight=info.config.weight,
            timeout_seconds=float(info.config.timeout),
            retry=dict(info.config.retry),
            correlation_key=info.correlation.text if info.correlation else None,
            key_parts=key_parts(info.correlation) if info.correlation else None,
            key_at_dispatch=info.key_at_dispatch,
            labels=dict(info.config.labels),
            notify=sorted(set(info.config.notify)) or None,
        )
        for info in job_types.values()
    ]
    queues = [MirroredQueue(name, q.concurrency) for name, q in settings.queues.items()]
    return types, queues


class JobTypesPublisher:
    """An activity: writes the mirror at start (after the store is ready)."""

    name = "job-types-mirror"

    def __init__(
        self,
        settings: Settings,
        job_types: JobTypes,
        store: Store,
        owner: str,
        clock: Callable[[], datetime],
    ) -> None:
        self.settings, self.job_types, self.store = settings, job_types, store
        self.owner, self.clock = owner, clock

    async def start(self) -> None:
        await self.run_once()

    async def stop(self) -> None:
        """The rows stay: other processes, and applications, still use them."""

    async def run_once(self) -> None:
        types, queues = mirror_of(self.settings, self.job_types)
        changes = await self.store.job_types_mirror_write(types, queues, self.owner, self.clock())
        for what, change in (("job types", changes.job_types), ("queues", changes.queues)):
            if change.changed or change.removed:
                log.warning(
                    "this config replaced the %s that applications enqueue against"
                    " (changed: %s; removed: %s); every hipq process of one database"
                    " should run the same config (once after a config change is expected)",
                    what,
                    ", ".join(change.changed) or "none",
                    ", ".join(change.removed) or "none",
                )
