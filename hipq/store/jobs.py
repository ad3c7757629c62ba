"""The jobs table, API side: insert (with idempotency and job keys), read, edit, prune.

The API edits only jobs that are not in flight; everything else about a job is
changed by its queue's loop inside ``QueueBatch``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import fields, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, case, delete, exists, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.batches import NewBatch
from hipq.dependencies import DependencyError, in_request, job_field
from hipq.job_keys import KeyAction, holder_states, key_action, replacing
from hipq.jobs import Attempt, Job, NewJob
from hipq.lifecycle import TERMINAL, State, check_transition
from hipq.operator_requests import key_taken_over
from hipq.store import state_guards as guards
from hipq.store.batches import batch_create, batch_join, batch_seal, batch_set_completion
from hipq.store.dependencies import park, prerequisites, refuse_cycle, wait_again
from hipq.store.labels import label_value
from hipq.store.records import BadReference, Conflict, InsertResult, JobFilter, NotFound
from hipq.store.rows import NEW_JOB_COLUMNS, conflict_from, job_from_new, new_row, row_to_job
from hipq.store.schema import (
    OPEN_JOB_KEY_WHERE,
    attempts,
    batches,
    idempotency_keys,
    job_dependencies,
    jobs,
    notifications,
)
from hipq.store.state_guards import OPEN_SQL, const
from hipq.store.transactions import Transactions
from hipq.store.wakeup import jobs_payload

# One request of ``job_insert_each``: its jobs, and its (Idempotency-Key, request hash).
InsertRequest = tuple[Sequence[NewJob], tuple[str, str] | None]

# A keyed insert that lost the race for its key looks again; each round waits for the
# transaction that won, so a second round is the rule and more are rare.
KEYED_INSERT_ROUNDS = 5
# Ids per statement of a read by many ids: SQLite limits a statement's parameters.
READ_CHUNK = 500

_EDITABLE = frozenset(
    {"run_at", "priority", "payload", "weight", "labels", "windows", "timeout_seconds"}
)


class JobTable(Transactions):
    async def job_insert_many(
        self,
        new_jobs: Sequence[NewJob],
        now: datetime,
        idempotency: tuple[str, str] | None = None,
        batch: NewBatch | None = None,
    ) -> InsertResult:
        """Insert all of ``new_jobs`` in one transaction, or none of them.

        ``idempotency`` is (key, request hash): a repeated key returns the jobs of
        the first request instead of inserting again. ``batch``: make them a batch
        (hipq.batches), with its completion job; else a job with a ``batch_id`` joins
        that batch (refused if it finished: ``Conflict``; or is unknown: ``BadReference``).
        """
        try:
            async with self._write() as conn:
                result = await self._insert_request(conn, new_jobs, now, idempotency, batch)
                if not result.replayed:
                    await self._notify(conn, {jobs_payload(j.queue) for j in new_jobs})
                return result
        except IntegrityError as exc:
            raise conflict_from(exc) from None

    async def job_insert_each(
        self, requests: Sequence[InsertRequest], now: datetime
    ) -> list[InsertResult | Conflict]:
        """Insert the jobs of several independent requests in one transaction (group
        commit); for each request its result, or the ``Conflict`` that refused it alone.

        Each request is all or none, as ``job_insert_many``, and a request the database
        refuses (a job_key or correlation_key an open job holds, a reused
        Idempotency-Key) never fails the others: keyed requests run under a savepoint
        each, and if the plain requests' one insert is refused, each is tried alone.
        """
        keyed = [i for i, (new, idem) in enumerate(requests) if idem or _may_be_refused_alone(new)]
        try:
            if not keyed:
                done = await self._insert_plain_committed(requests, now)
                if done is not None:
                    return done
            return await self._insert_each(requests, now, isolate=False)
        except IntegrityError as exc:
            if len(requests) == 1:
                return [conflict_from(exc)]
        # Some plain request was refused: each one alone, under a savepoint of its own.
        return await self._insert_each(requests, now, isolate=True)

    async def _insert_plain_committed(
        self, requests: Sequence[InsertRequest], now: datetime
    ) -> list[InsertResult | Conflict] | None:
        """Unkeyed jobs and their wake-ups as one statement that commits on its own,
        where the dialect has one (PostgreSQL); None elsewhere."""
        rows = [new_row(j, now) for new, _ in requests for j in new]
        notices = sorted({jobs_payload(r["queue"]) for r in rows})
        ids = await self.dialect.job_insert_committed(self.engine, rows, notices)
        if ids is None:
            return None
        for payload in notices:  # committed: tell this process's listeners too
            for listener in self.listeners:
                listener(payload)
        made = iter([job_from_new(i, row) for i, row in zip(ids, rows, strict=True)])
        return [InsertResult([next(made) for _ in new]) for new, _ in requests]

    async def _insert_each(
        self, requests: Sequence[InsertRequest], now: datetime, isolate: bool
    ) -> list[InsertResult | Conflict]:
        out: list[InsertResult | Conflict | None] = [None] * len(requests)
        async with self._write() as conn:
            together = [
                i
                for i, (new, idem) in enumerate(requests)
                if not (isolate or idem or _may_be_refused_alone(new))
            ]
            if together:
                made = iter(
                    await self._insert(conn, [j for i in together for j in requests[i][0]], now)
                )
                for i in together:
                    out[i] = InsertResult([next(made) for _ in requests[i][0]])
            for i, (new, idem) in enumerate(requests):
                if out[i] is not None:
                    continue
                try:
                    async with conn.begin_nested():
                        out[i] = await self._insert_request(conn, new, now, idem)
                except Conflict as exc:
                    out[i] = exc
                except IntegrityError as exc:
                    out[i] = conflict_from(exc)
            queues = {
                j.queue
                for r in out
                if isinstance(r, InsertResult) and not r.replayed
                for j in r.jobs
            }
            if queues:
                await self._notify(conn, {jobs_payload(q) for q in queues})
        return [r for r in out if r is not None]

    async def _insert_request(
        self,
        conn: AsyncConnection,
        new_jobs: Sequence[NewJob],
        now: datetime,
        idempotency: tuple[str, str] | None,
        batch: NewBatch | None = None,
    ) -> InsertResult:
        """One request's jobs, inside the caller's transaction (``job_insert_many``'s body)."""
        if idempotency:
            earlier = await self._idempotency_claim(conn, *idempotency, now)
            if earlier is not None:
                found = await self._jobs_by_ids(conn, earlier)
                if len(found) != len(earlier):
                    # Deleted (by an operator or job_retention) since: making them again
                    # would run a request twice that the key says ran once.
                    raise Conflict(
                        "Idempotency-Key was used by a request whose jobs were deleted since",
                        field="Idempotency-Key",
                    )
                return InsertResult(found, replayed=True)
        if batch is None:
            result = await self._insert(conn, new_jobs, now)
        else:
            result = await self._insert_batch(conn, new_jobs, batch, now)
        if idempotency:
            await conn.execute(
                update(idempotency_keys)
                .where(idempotency_keys.c.key == idempotency[0])
                .values(job_ids=[j.id for j in result])
            )
        return InsertResult(result)

    async def _idempotency_claim(
        self, conn: AsyncConnection, key: str, request_hash: str, now: datetime
    ) -> list[int] | None:
        stmt = (
            self.dialect.insert(idempotency_keys)
            .values(key=key, request_hash=request_hash, job_ids=[], created_at=now)
            .on_conflict_do_nothing()
            .returning(idempotency_keys.c.key)
        )
        if (await conn.execute(stmt)).first() is not None:
            return None
        row = (
            await conn.execute(select(idempotency_keys).where(idempotency_keys.c.key == key))
        ).one()
        if row.request_hash != request_hash:
            raise Conflict(
                "Idempotency-Key was already used with a different request", field="Idempotency-Key"
            )
        return list(row.job_ids)

    async def idempotency_prune(self, before: datetime) -> int:
        """Forget the Idempotency-Keys created before ``before``; how many."""
        async with self._write() as conn:
            done = await conn.execute(
                delete(idempotency_keys).where(idempotency_keys.c.created_at < before)
            )
        return done.rowcount or 0

    async def _insert(
        self, conn: AsyncConnection, new_jobs: Sequence[NewJob], now: datetime
    ) -> list[Job]:
        """Every path that stores new jobs comes here (a request's, a schedule's)."""
        if any(j.batch_id for j in new_jobs):
            return await self._insert_joining(conn, new_jobs, now)
        return await self._insert_new(conn, new_jobs, now)

    async def _insert_new(
        self, conn: AsyncConnection, new_jobs: Sequence[NewJob], now: datetime
    ) -> list[Job]:
        """The jobs' rows as they are (``batch_id`` included: see ``_insert_batch``)."""
        if any(j.after for j in new_jobs):
            return await self._insert_after(conn, new_jobs, now)
        out: list[Job | None] = [None] * len(new_jobs)
        plain = [(i, new_row(j, now)) for i, j in enumerate(new_jobs) if not j.job_key]
        if plain:
            ids = await self.dialect.job_insert_rows(conn, [row for _, row in plain])
            for (i, row), job_id in zip(plain, ids, strict=True):
                out[i] = job_from_new(job_id, row)
        for i, job in enumerate(new_jobs):
            if job.job_key:
                out[i] = await self._insert_keyed(conn, job, now)
        return [j for j in out if j is not None]

    async def _insert_after(
        self, conn: AsyncConnection, new_jobs: Sequence[NewJob], now: datetime
    ) -> list[Job]:
        """A request whose jobs run after others, set-based: the stored jobs they name
        found and locked at once, then its jobs in rounds, each round the jobs whose
        prerequisites of the request are stored already (a fan-out of any size is one
        round: one insert, one park), then read back as stored."""
        try:
            order, inner = in_request(new_jobs)
        except DependencyError as exc:
            raise BadReference(exc.message, exc.field) from None
        outer = {
            (i, k): ref
            for i, job in enumerate(new_jobs)
            for k, ref in enumerate(job.after or ())
            if k not in inner[i]
        }
        # One request's jobs are one caller's: they name the jobs of one tenant.
        tenant = new_jobs[0].tenant if new_jobs else ""
        stored = await prerequisites(conn, self.dialect, outer, order, len(new_jobs), tenant)
        made: dict[int, Job] = {}
        for round_ in _rounds(order, inner):
            resolved: dict[int, tuple[NewJob, list[tuple[int, str]]]] = {}
            for i in round_:
                job = new_jobs[i]
                found = {k: stored[(i, k)] for k in range(len(job.after or ())) if (i, k) in stored}
                for k, j in inner[i].items():
                    found[k] = (made[j].id, made[j].state.value)
                after = list(dict.fromkeys(found[k] for k in sorted(found)))
                after_failed = job.after_failed or "cancel"
                ids: list[int | str] = [a for a, _ in after]
                resolved[i] = (replace(job, after=ids or None, after_failed=after_failed), after)
            plain = [i for i in round_ if not new_jobs[i].job_key]
            if plain:
                rows = [new_row(resolved[i][0], now) for i in plain]
                for i, job_id, row in zip(
                    plain, await self.dialect.job_insert_rows(conn, rows), rows, strict=True
                ):
                    made[i] = job_from_new(job_id, row)
            for i in round_:
                if new_jobs[i].job_key:
                    made[i] = await self._insert_keyed(conn, resolved[i][0], now)
            waits = [
                (made[i], resolved[i][1], resolved[i][0].after_failed or "cancel") for i in round_
            ]
            ended = await park(conn, self.dialect, [w for w in waits if w[1]], now)
            for i in round_:
                if made[i].id in ended:
                    made[i] = made[i]._replace(state=ended[made[i].id])
                elif new_jobs[i].job_key and resolved[i][1]:
                    # A job found by its key may be one that others wait for already.
                    field = job_field(i, len(new_jobs), "after")
                    how = f"job {made[i].id} (job_key {new_jobs[i].job_key!r})"
                    await refuse_cycle(conn, self.dialect, made[i].id, field, how)
        return await self._jobs_by_ids(conn, [made[i].id for i in range(len(new_jobs))])

    async def _insert_batch(
        self, conn: AsyncConnection, new_jobs: Sequence[NewJob], batch: NewBatch, now: datetime
    ) -> list[Job]:
        """A request's jobs as a new batch: made open, with its completion job, joined
        by the jobs, and sealed (it finishes at once if none of them is pending).

        The new jobs are stored with the batch's id, which no other transaction knows
        yet: the count trigger counts their ends from the start and only the total is
        added after (the batch is open meanwhile, so it cannot finish early); a job
        found by its job_key instead joins as in ``_insert_joining``.
        """
        batch_id = await self._batch_make(conn, batch, now)
        made = await self._insert_new(conn, [replace(j, batch_id=batch_id) for j in new_jobs], now)
        stored = len({j.id for j in made if j.batch_id == batch_id})
        found = [j for j in made if j.batch_id is None]
        joined = iter(await batch_join(conn, batch_id, found, "batch", stored, batch.owner))
        made = [next(joined) if j.batch_id is None else j for j in made]
        # A job may name the completion job made just now by its id.
        await self._refuse_batch_cycle(conn, batch_id, made)
        await batch_seal(conn, batch_id, now)
        return made

    async def _insert_joining(
        self, conn: AsyncConnection, new_jobs: Sequence[NewJob], now: datetime
    ) -> list[Job]:
        """A request whose jobs join existing batches (``batch_id``), each batch in
        the order of its id (two requests joining the same two batches wait for each
        other in one order)."""
        stored = [replace(j, batch_id=None) for j in new_jobs]
        made = await self._insert(conn, stored, now)
        for batch_id in sorted({j.batch_id for j in new_jobs if j.batch_id}):
            places = [i for i, j in enumerate(new_jobs) if j.batch_id == batch_id]
            field = job_field(places[0], len(new_jobs), "batch_id")
            # A request's jobs are one tenant's ('' the service's: it names any batch).
            owner = new_jobs[places[0]].tenant or None
            joined = await batch_join(conn, batch_id, [made[i] for i in places], field, 0, owner)
            for i, job in zip(places, joined, strict=True):
                made[i] = job
            here = set(places)
            await self._refuse_batch_cycle(
                conn, batch_id, [j if i in here else None for i, j in enumerate(made)]
            )
        return made

    async def _refuse_batch_cycle(
        self, conn: AsyncConnection, batch_id: int, joined: Sequence[Job | None]
    ) -> None:
        """The batch's completion job waits for the jobs that joined it: refused if one
        of them waits for that completion job (``joined``: the request's jobs, by place,
        None for those that joined another batch)."""
        waiting = [i for i, j in enumerate(joined) if j is not None and j.waiting_for]
        if not waiting:
            return
        completion = (
            await conn.execute(select(batches.c.completion_job_id).where(batches.c.id == batch_id))
        ).scalar_one_or_none()
        if completion is not None:
            field = job_field(waiting[0], len(joined), "after")
            how = f"the completion job {completion} of batch {batch_id}"
            await refuse_cycle(conn, self.dialect, completion, field, how)

    async def _batch_make(self, conn: AsyncConnection, batch: NewBatch, now: datetime) -> int:
        """An open batch, and its completion job waiting for it to finish."""
        batch_id = await batch_create(conn, batch, now)
        if batch.completion is not None:
            job = await self._insert_plain_or_keyed(conn, batch.completion, now)
            await batch_set_completion(conn, batch_id, job, now)
        return batch_id

    async def batch_open(self, batch: NewBatch, now: datetime) -> int:
        """A batch made open (``POST /v1/batches``): jobs join it by its id until it is
        sealed and finished. Its id."""
        async with self._write() as conn:
            return await self._batch_make(conn, batch, now)

    async def _insert_plain_or_keyed(
        self, conn: AsyncConnection, job: NewJob, now: datetime
    ) -> Job:
        if job.job_key:
            return await self._insert_keyed(conn, job, now)
        row = new_row(job, now)
        (job_id,) = await self.dialect.job_insert_rows(conn, [row])
        return job_from_new(job_id, row)

    async def _insert_keyed(self, conn: AsyncConnection, job: NewJob, now: datetime) -> Job:
        """job_key de-duplication: ``unique_for``, then graphile-worker's three modes.

        Concurrent first inserts of one key: the insert skips a row another transaction
        committed meanwhile (``ON CONFLICT DO NOTHING`` on the open-key index waits for
        it), and the next round finds that job and applies the mode to it, so every
        request gets the one job instead of a conflict.
        """
        row = new_row(job, now)
        for _round in range(KEYED_INSERT_ROUNDS):
            earlier = None
            if job.unique_for_seconds is not None:
                since = now - timedelta(seconds=job.unique_for_seconds)
                earlier = await self._key_created_since(conn, job, since)
            current = None if earlier is not None else await self._key_holder(conn, job)
            holder = None if current is None else (current.state, current.attempt)
            action = key_action(job.job_key_mode, holder, in_period=earlier is not None)
            answer = earlier or current
            if action is KeyAction.RETURN and answer is not None:
                return answer
            if current is not None and action is KeyAction.TAKE_OVER:
                await conn.execute(
                    update(jobs)
                    .where(jobs.c.id == current.id)
                    .values(job_key=None, retry=key_taken_over(current.retry), updated_at=now)
                )
            elif current is not None and action is not KeyAction.INSERT:
                new = {k: row[k] for k in NEW_JOB_COLUMNS}
                changes = replacing(new, action, now)
                if current.after and current.waiting_for:
                    # What it waits for is replaced too: the new job's after, parked
                    # by the caller (hipq.store.dependencies), else nothing.
                    await conn.execute(
                        delete(job_dependencies).where(
                            job_dependencies.c.job_id == current.id,
                            job_dependencies.c.outcome.is_(None),
                        )
                    )
                    changes.update(waiting_for=0)
                    changes.setdefault("run_at", current.after_run_at or now)  # its own
                return await self._job_update_guarded(
                    conn, current.id, guards.KEYED_REPLACE, changes
                )
            stmt = (
                self.dialect.insert(jobs)
                .values(row)
                .on_conflict_do_nothing(
                    index_elements=[jobs.c.tenant, jobs.c.job_key],
                    index_where=OPEN_JOB_KEY_WHERE,
                )
                .returning(jobs.c.id)
            )
            job_id = (await conn.execute(stmt)).scalar_one_or_none()
            if job_id is not None:
                return job_from_new(job_id, row)
        raise Conflict(f"job_key {job.job_key!r} is contended; try again", field="job_key")

    async def _key_holder(self, conn: AsyncConnection, job: NewJob) -> Job | None:
        """The job of ``job``'s owner holding its key for its mode, locked: an open one
        first (the one the open-key index allows), else the latest that failed for good."""
        holders = [const(s.value) for s in sorted(holder_states(job.job_key_mode))]
        query = (
            select(jobs)
            .where(
                jobs.c.job_key == job.job_key,
                jobs.c.tenant == job.tenant,
                jobs.c.state.in_(holders),
            )
            .order_by(case((jobs.c.state.in_(OPEN_SQL), 0), else_=1), jobs.c.id.desc())
            .limit(1)
        )
        existing = (await conn.execute(self.dialect.for_update(query))).first()
        return None if existing is None else row_to_job(existing)

    async def _key_created_since(
        self, conn: AsyncConnection, job: NewJob, since: datetime
    ) -> Job | None:
        """The first job of ``job``'s owner holding its key created at or after
        ``since``, in any state."""
        query = (
            select(jobs)
            .where(
                jobs.c.job_key == job.job_key,
                jobs.c.tenant == job.tenant,
                jobs.c.created_at >= since,
            )
            .order_by(jobs.c.created_at, jobs.c.id)
            .limit(1)
        )
        row = (await conn.execute(query)).first()
        return None if row is None else row_to_job(row)

    async def _jobs_by_ids(self, conn: AsyncConnection, ids: Sequence[int]) -> list[Job]:
        by_id = {j.id: j for j in await read_jobs_of(conn, ids)}
        return [by_id[i] for i in ids if i in by_id]

    async def job_get(self, job_id: int) -> Job:
        async with self._read() as conn:
            return await read_job(conn, job_id)

    async def job_dependents(self, job_id: int, limit: int = 100) -> list[int]:
        """The ids of the jobs that run after ``job_id`` (the first ``limit``)."""
        query = (
            select(job_dependencies.c.job_id)
            .where(job_dependencies.c.after_id == job_id)
            .order_by(job_dependencies.c.job_id)
            .limit(limit)
        )
        async with self._read() as conn:
            return list((await conn.execute(query)).scalars())

    async def job_attempts(self, job_id: int) -> list[Attempt]:
        async with self._read() as conn:
            return await read_attempts(conn, job_id)

    async def job_list(self, flt: JobFilter) -> list[Job]:
        query = select(jobs).order_by(jobs.c.id.desc()).limit(flt.limit)
        conds = []
        if flt.queue:
            conds.append(jobs.c.queue == flt.queue)
        if flt.states:
            conds.append(jobs.c.state.in_(flt.states))
        if flt.type:
            conds.append(jobs.c.type == flt.type)
        if flt.job_key:
            conds.append(jobs.c.job_key == flt.job_key)
        for name, value in flt.labels.items():
            conds.append(label_value(jobs.c.labels, name) == value)
        if flt.after_id is not None:
            conds.append(jobs.c.id < flt.after_id)
        if conds:
            query = query.where(and_(*conds))
        async with self._read() as conn:
            return [row_to_job(r) for r in (await conn.execute(query)).all()]

    async def job_update_pending(
        self,
        job_id: int,
        changes: dict[str, Any],
        now: datetime,
        resolve: Callable[[Job], dict[str, Any]] | None = None,
    ) -> Job:
        """Change a scheduled job. ``resolve`` turns ``changes`` into the final ones from
        the locked job (and may refuse them), so the read and the update are one transaction."""
        unknown = set(changes) - _EDITABLE
        if unknown:
            raise Conflict(f"cannot change {', '.join(sorted(unknown))}", field=sorted(unknown)[0])
        async with self._write() as conn:
            job = await self._job_locked(conn, job_id)
            if resolve is not None:
                changes = resolve(job)
            if job.state not in guards.UPDATE_PENDING.sources:
                raise Conflict(
                    f"job {job_id} is {job.state}; only scheduled jobs can be changed",
                    field="state",
                )
            changes = {**changes, "updated_at": now, "waiting_reason": None}
            if job.waiting_for:  # it waits for jobs: its own run_at changes, not the parked one
                changes["waiting_reason"] = job.waiting_reason
                if "run_at" in changes:
                    changes["after_run_at"] = changes.pop("run_at")
            job = await self._job_update_guarded(conn, job_id, guards.UPDATE_PENDING, changes)
            await self._notify(conn, {jobs_payload(job.queue)})
            return job

    async def job_retry(self, job_id: int, now: datetime, run_at: datetime | None = None) -> Job:
        """An operator's retry of a failed or cancelled job: it runs again as a new attempt."""
        try:
            async with self._write() as conn:
                job = await self._job_locked(conn, job_id)
                if job.state not in guards.RETRY.sources:
                    raise Conflict(
                        f"job {job_id} is {job.state}; "
                        "only failed or cancelled jobs can be retried",
                        field="state",
                    )
                check_transition(job.state, State.SCHEDULED)
                again = {
                    "state": State.SCHEDULED.value,
                    "run_at": run_at or now,
                    "finished_at": None,
                    "updated_at": now,
                    "cancel_requested": False,
                    "waiting_reason": None,
                }
                job = await self._job_update_guarded(conn, job_id, guards.RETRY, again)
                if job.after or job.waiting_for:  # it waits again for what has not ended
                    await wait_again(conn, [job_id], now)
                    job = await self._job_locked(conn, job_id)
                await self._notify(conn, {jobs_payload(job.queue)})
                return job
        except IntegrityError as exc:
            raise conflict_from(exc) from None

    async def job_prune(self, state: State, finished_before: datetime, limit: int = 5000) -> int:
        """Delete up to ``limit`` jobs in the finished ``state`` that finished before
        ``finished_before``, with their attempts, oldest ids first; how many."""
        if state not in TERMINAL:
            raise ValueError(f"only finished jobs are pruned, not {state.value}")
        async with self._write() as conn:
            query = (
                select(jobs.c.id)
                .where(
                    jobs.c.state == const(state.value),
                    jobs.c.finished_at < finished_before,
                    # A job whose outcome is still being notified stays until it is sent.
                    ~exists().where(
                        notifications.c.job_id == jobs.c.id, notifications.c.status != "sent"
                    ),
                )
                .order_by(jobs.c.id)
                .limit(limit)
            )
            # A job being retried right now keeps its row and its attempts.
            ids = list((await conn.execute(self.dialect.skip_locked(query))).scalars())
            if ids:
                await conn.execute(delete(attempts).where(attempts.c.job_id.in_(ids)))
                await conn.execute(delete(notifications).where(notifications.c.job_id.in_(ids)))
                await conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
        return len(ids)


def _rounds(order: Sequence[int], inner: Sequence[dict[int, int]]) -> list[list[int]]:
    """The jobs of a request in rounds: each job in the round after the last of the
    request's jobs it runs after (``order`` puts those first), in ``order`` within one."""
    depth: dict[int, int] = {}
    for i in order:
        depth[i] = 1 + max((depth[j] for j in inner[i].values()), default=-1)
    rounds: list[list[int]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for i in order:
        rounds[depth[i]].append(i)
    return rounds


def _may_be_refused_alone(new_jobs: Sequence[NewJob]) -> bool:
    """A job_key, an ``after`` or a ``batch_id``: each looks up other rows, and may be
    refused alone."""
    return any(j.job_key or j.after or j.batch_id for j in new_jobs)


# The reads of many jobs by id, over an id predicate (``IdIn``): SQLAlchemy runs them
# with ``IN`` per ``READ_CHUNK`` ids (below); the store's view reads compile them once
# with all ids in one parameter (``hipq.store.view_reads``).
IdIn = Callable[[Any], Any]


def jobs_of_query(id_in: IdIn) -> Select[Any]:
    return select(jobs).where(id_in(jobs.c.id))


def states_of_query(id_in: IdIn) -> Select[Any]:
    return select(jobs.c.id, jobs.c.state, jobs.c.queue).where(id_in(jobs.c.id))


def attempts_of_query(id_in: IdIn) -> Select[Any]:
    return select(attempts).where(id_in(attempts.c.job_id)).order_by(attempts.c.id)


# An attempt's fields, picked from a row of the attempts table (its id is not one).
_ATTEMPT_PICK = operator.itemgetter(*(attempts.c.keys().index(f.name) for f in fields(Attempt)))


def attempts_by_job(rows: Iterable[Any]) -> dict[int, list[Attempt]]:
    """Rows of ``attempts_of_query`` (SQLAlchemy rows or asyncpg records), in order,
    per job."""
    out: dict[int, list[Attempt]] = {}
    for row in rows:
        attempt = Attempt(*_ATTEMPT_PICK(row))
        out.setdefault(attempt.job_id, []).append(attempt)
    return out


def in_list(ids: list[int]) -> IdIn:
    """The id predicate ``IN (...)``, one parameter per id."""
    return lambda column: column.in_(ids)


async def chunked_rows(
    conn: AsyncConnection, query: Callable[[IdIn], Select[Any]], job_ids: Sequence[int]
) -> list[Any]:
    """The rows of ``query`` for ``job_ids``, one statement per ``READ_CHUNK`` ids."""
    rows: list[Any] = []
    for start in range(0, len(job_ids), READ_CHUNK):
        chunk = list(job_ids[start : start + READ_CHUNK])
        rows.extend((await conn.execute(query(in_list(chunk)))).all())
    return rows


async def read_jobs_of(conn: AsyncConnection, job_ids: Sequence[int]) -> list[Job]:
    """Those of ``job_ids`` that exist."""
    return [row_to_job(r) for r in await chunked_rows(conn, jobs_of_query, job_ids)]


async def read_states_of(
    conn: AsyncConnection, job_ids: Sequence[int]
) -> list[tuple[int, State, str]]:
    """Id, state and queue of those of ``job_ids`` that exist: whether they are
    finished, without decoding their rows."""
    return [(i, State(s), q) for i, s, q in await chunked_rows(conn, states_of_query, job_ids)]


async def read_job(conn: AsyncConnection, job_id: int) -> Job:
    row = (await conn.execute(select(jobs).where(jobs.c.id == job_id))).first()
    if row is None:
        raise NotFound(f"job {job_id} does not exist", field="id")
    return row_to_job(row)


async def read_attempts(conn: AsyncConnection, job_id: int) -> list[Attempt]:
    return (await read_attempts_of(conn, [job_id])).get(job_id, [])


async def read_attempts_of(
    conn: AsyncConnection, job_ids: Sequence[int]
) -> dict[int, list[Attempt]]:
    """The attempts of each of ``job_ids`` that has any, in order."""
    return attempts_by_job(await chunked_rows(conn, attempts_of_query, job_ids))
