"""Single-job POSTs stored together: one transaction for all requests waiting.

A transaction per ``POST /v1/jobs`` made the commit (and on PostgreSQL its round
trips and NOTIFY) the limit of concurrent clients. Here one writer inserts every
request that arrived while the previous insert ran (group commit), so a burst of
requests shares one commit, and a lone request is written at once, with no added
wait. Each request still answers only after that commit, with its own jobs, its
own Idempotency-Key and job_key handling, and its own refusal
(``Store.job_insert_each`` keeps one refused request from failing the others).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime

from hipq.jobs import NewJob
from hipq.store import Conflict, InsertResult, Store

# Requests per transaction; more wait for the next one.
MAX_GROUP = 500

_Waiting = tuple[Sequence[NewJob], tuple[str, str] | None, "asyncio.Future[InsertResult]"]


class JobWriter:
    """An ``Activity`` whose work arrives through ``insert``: it has nothing to start,
    and stopping waits for the inserts already accepted."""

    name = "job-writer"

    def __init__(self, store: Store, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock
        self._waiting: list[_Waiting] = []
        self._writer: asyncio.Task[None] | None = None

    async def insert(
        self, new_jobs: Sequence[NewJob], idempotency: tuple[str, str] | None = None
    ) -> InsertResult:
        """Insert one request's jobs (all or none); its result once committed.

        Raises ``Conflict`` when the database refuses this request."""
        done: asyncio.Future[InsertResult] = asyncio.get_running_loop().create_future()
        # Retrieved here too, so that a failure nobody waits for any more is not logged as lost.
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._waiting.append((new_jobs, idempotency, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name="hipq-job-writer")
        # A caller that gives up (its client went away) leaves the insert to go on: the
        # other requests in its transaction still need it.
        return await asyncio.shield(done)

    async def start(self) -> None:
        """Nothing to start: the first ``insert`` starts a writer."""

    async def stop(self) -> None:
        await self.close()

    async def run_once(self) -> int:
        """Insert the requests waiting now, in the caller's task; how many waited."""
        waiting = len(self._waiting)
        await self.close()
        if self._waiting:
            await self._drain()
        return waiting

    async def close(self) -> None:
        """Wait for the inserts already accepted."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)

    async def _drain(self) -> None:
        while self._waiting:
            group, self._waiting = self._waiting[:MAX_GROUP], self._waiting[MAX_GROUP:]
            try:
                await self._insert_group(group)
            except BaseException:
                # Cancelled (at shutdown): no caller answers 201, so each client retries.
                for *_, done in [*group, *self._waiting]:
                    if not done.done():
                        done.cancel()
                self._waiting.clear()
                raise

    async def _insert_group(self, group: list[_Waiting]) -> None:
        try:
            results = await self._store.job_insert_each(
                [(new_jobs, idempotency) for new_jobs, idempotency, _ in group], self._clock()
            )
        except Exception as exc:  # the transaction as a whole failed: every request did
            for *_, done in group:
                if not done.done():
                    done.set_exception(exc)
            return
        for (*_, done), result in zip(group, results, strict=True):
            if done.done():
                continue
            if isinstance(result, Conflict):
                done.set_exception(result)
            else:
                done.set_result(result)
