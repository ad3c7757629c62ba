"""Single-job POSTs stored together: one transaction for all requests waiting.

A transaction per ``POST /v1/jobs`` made the commit (and on PostgreSQL its round
trips and NOTIFY) the limit of concurrent clients. Through ``GroupCommit`` a burst
of requests shares one commit, and a lone request is written at once. Each request
still answers only after that commit, with its own jobs, its own Idempotency-Key
and job_key handling, and its own refusal (``Store.job_insert_each`` keeps one
refused request from failing the others).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from hipq.ingest.group_commit import GroupCommit
from hipq.jobs import NewJob
from hipq.store import InsertResult, Store

_Request = tuple[Sequence[NewJob], tuple[str, str] | None]


class JobWriter(GroupCommit[_Request, InsertResult]):
    name = "job-writer"
    max_group = 500

    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        super().__init__()
        self._store = store
        self._clock = clock

    async def insert(
        self, new_jobs: Sequence[NewJob], idempotency: tuple[str, str] | None = None
    ) -> InsertResult:
        """Insert one request's jobs (all or none); its result once committed.

        Raises ``Conflict`` when the database refuses this request."""
        return await self.submit((new_jobs, idempotency))

    async def write_group(self, items: list[_Request]) -> Sequence[InsertResult | Exception]:
        return await self._store.job_insert_each(items, self._clock())
