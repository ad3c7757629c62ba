"""The one storage seam of hipq: noun-first methods over SQLAlchemy Core.

The API side inserts and edits jobs that are not in flight; the queue loop changes
everything else inside ``queue_batch`` (one transaction per tick, fenced by the
queue's lease). Dialect differences live in ``hipq.store.dialects``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import String, and_, cast, delete, func, literal, literal_column, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hipq.jobs import Attempt, Job, NewJob, Start
from hipq.lifecycle import IN_FLIGHT, OPEN, TERMINAL, State, check_transition
from hipq.outcomes import Settlement
from hipq.queue_order import order_key
from hipq.store import dialects
from hipq.store.records import (
    Conflict,
    InsertResult,
    JobFilter,
    LeaseLost,
    Match,
    NewResponse,
    NotFound,
    ParkedMessage,
    QueueCounts,
    Response,
)
from hipq.store.schema import (
    attempts,
    idempotency_keys,
    jobs,
    parked_messages,
    queues,
    responses,
)

_OPEN = [s.value for s in OPEN]
# Spelled out rather than IN (...): executemany cannot expand an IN list.
_IN_FLIGHT = [s.value for s in IN_FLIGHT]


def _const(value: str) -> Any:
    """A state written into the SQL text rather than bound as a parameter.

    PostgreSQL uses a partial index (state = 'scheduled', status = 'pending', open
    correlation and job keys) only where it can prove the index's predicate from
    constants in the query. asyncpg prepares every statement, and after a few runs
    the server may keep a generic plan built without the values: matching the
    responses inbox then scanned every in-flight job for each pending response.
    """
    return literal_column(f"'{value}'")


_SCHEDULED = _const(State.SCHEDULED.value)
_RUNNING = _const(State.RUNNING.value)
_PENDING = _const("pending")
_IN_FLIGHT_SQL = [_const(v) for v in _IN_FLIGHT]
_OPEN_SQL = [_const(v) for v in _OPEN]
_IS_IN_FLIGHT = jobs.c.state.in_(_IN_FLIGHT_SQL)
_NEW_JOB_COLUMNS = (
    "type queue payload run_at priority weight labels windows timeout_seconds retry critical "
    "correlation_key job_key"
).split()
_EDITABLE = frozenset(
    {"run_at", "priority", "payload", "weight", "labels", "windows", "timeout_seconds"}
)


_STATES = {s.value: s for s in State}


_ORDER = [jobs.c.keys().index(name) for name in Job._fields]
_STATE_AT = Job._fields.index("state")


def row_to_job(row: Any) -> Job:
    # Hot path: the due scan converts up to batch_size rows per tick. Rows of
    # select(jobs) come in table column order; pick them in Job's field order.
    values = [row[i] for i in _ORDER]
    values[_STATE_AT] = _STATES[values[_STATE_AT]]
    return Job._make(values)


def _new_row(job: NewJob, now: datetime) -> dict[str, Any]:
    row = {name: getattr(job, name) for name in _NEW_JOB_COLUMNS}
    row.update(
        state=State.SCHEDULED.value,
        attempt=0,
        created_at=now,
        updated_at=now,
        cancel_requested=False,
    )
    return row


def _job_from_new(job_id: int, row: dict[str, Any]) -> Job:
    return Job(id=job_id, **{**row, "state": State.SCHEDULED})


def _conflict_from(exc: IntegrityError) -> Conflict:
    text = str(exc.orig)
    for name in ("correlation_key", "job_key"):
        if name in text:
            return Conflict(f"{name} is already used by an open job", field=name)
    return Conflict(f"conflicting write: {text.splitlines()[0]}")


class Store:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        # Called after a commit with each NOTIFY payload it sent, so that this
        # process's loops hear their news the same way other processes do.
        self.listeners: list[Callable[[str], None]] = []
        self._notices: dict[int, set[str]] = {}  # open write transaction -> payloads

    @classmethod
    def from_url(cls, url: str, **engine_kwargs: Any) -> Store:
        return cls(dialects.create_engine(url, **engine_kwargs))

    async def close(self) -> None:
        await self.engine.dispose()

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn:
            await conn.execution_options(hipq_write=True)
            sent: set[str] = set()
            self._notices[id(conn)] = sent
            try:
                async with conn.begin():
                    yield conn
            finally:
                self._notices.pop(id(conn), None)
            for payload in sent:  # committed: tell this process's listeners too
                for listener in self.listeners:
                    listener(payload)

    async def _notify(self, conn: AsyncConnection, payloads: set[str]) -> None:
        """NOTIFY other processes, and this one's listeners once the transaction commits."""
        pending = self._notices.get(id(conn))
        if pending is not None:
            pending.update(payloads)
        await dialects.notify(conn, payloads)

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        async with self.engine.connect() as conn, conn.begin():
            yield conn

    async def check(self) -> None:
        async with self._read() as conn:
            await dialects.check_engine(conn)

    # -- jobs, API side -------------------------------------------------------------

    async def job_insert_many(
        self,
        new_jobs: Sequence[NewJob],
        now: datetime,
        idempotency: tuple[str, str] | None = None,
    ) -> InsertResult:
        """Insert all of ``new_jobs`` in one transaction, or none of them.

        ``idempotency`` is (key, request hash): a repeated key returns the jobs of
        the first request instead of inserting again.
        """
        try:
            async with self._write() as conn:
                if idempotency:
                    earlier = await self._idempotency_claim(conn, *idempotency, now)
                    if earlier is not None:
                        return InsertResult(await self._jobs_by_ids(conn, earlier), replayed=True)
                result = await self._insert(conn, new_jobs, now)
                if idempotency:
                    await conn.execute(
                        update(idempotency_keys)
                        .where(idempotency_keys.c.key == idempotency[0])
                        .values(job_ids=[j.id for j in result])
                    )
                await self._notify(conn, {j.queue for j in new_jobs})
                return InsertResult(result)
        except IntegrityError as exc:
            raise _conflict_from(exc) from None

    async def _idempotency_claim(
        self, conn: AsyncConnection, key: str, request_hash: str, now: datetime
    ) -> list[int] | None:
        stmt = (
            dialects.dialect_insert(conn, idempotency_keys)
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

    async def _insert(
        self, conn: AsyncConnection, new_jobs: Sequence[NewJob], now: datetime
    ) -> list[Job]:
        out: list[Job | None] = [None] * len(new_jobs)
        plain = [(i, _new_row(j, now)) for i, j in enumerate(new_jobs) if not j.job_key]
        if plain:
            ids = await self._insert_rows(conn, [row for _, row in plain])
            for (i, row), job_id in zip(plain, ids, strict=True):
                out[i] = _job_from_new(job_id, row)
        for i, job in enumerate(new_jobs):
            if job.job_key:
                out[i] = await self._insert_keyed(conn, job, now)
        return [j for j in out if j is not None]

    async def _insert_rows(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> list[int]:
        """Insert job rows; their ids in the order given."""
        if self.dialect == "sqlite":
            # SQLAlchemy can only return ids in order by inserting row by row on SQLite.
            # Writers are serialised (BEGIN IMMEDIATE) and INTEGER PRIMARY KEY takes
            # max(rowid) + 1, so one executemany gives consecutive ids ending at the last.
            await conn.execute(jobs.insert(), rows)
            last = (await conn.exec_driver_sql("SELECT last_insert_rowid()")).scalar_one()
            return list(range(last - len(rows) + 1, last + 1))
        return await dialects.insert_jobs_unnest(conn, rows, rows[0]["created_at"])

    async def _insert_keyed(self, conn: AsyncConnection, job: NewJob, now: datetime) -> Job:
        """job_key de-duplication, with graphile-worker's three modes."""
        query = select(jobs).where(jobs.c.job_key == job.job_key, jobs.c.state.in_(_OPEN_SQL))
        if self.dialect == "postgresql":
            query = query.with_for_update()
        existing = (await conn.execute(query)).first()
        row = _new_row(job, now)
        if existing is not None:
            current = row_to_job(existing)
            if job.job_key_mode == "unsafe_dedupe":
                return current
            if current.state == State.SCHEDULED:
                changes = {k: row[k] for k in _NEW_JOB_COLUMNS if k not in ("job_key", "queue")}
                if job.job_key_mode == "preserve_run_at":
                    changes.pop("run_at")
                changes.update(updated_at=now, waiting_reason=None)
                return await self._update_guarded(conn, current.id, State.SCHEDULED, changes)
            # In flight: the running job lets go of the key and a new job takes it.
            await conn.execute(update(jobs).where(jobs.c.id == current.id).values(job_key=None))
        job_id = (await conn.execute(jobs.insert().returning(jobs.c.id), row)).scalar_one()
        return _job_from_new(job_id, row)

    async def _update_guarded(
        self, conn: AsyncConnection, job_id: int, expected: State, values: dict[str, Any]
    ) -> Job:
        stmt = (
            update(jobs)
            .where(jobs.c.id == job_id, jobs.c.state == expected.value)
            .values(**values)
            .returning(*jobs.c)
        )
        row = (await conn.execute(stmt)).first()
        if row is None:
            raise Conflict(f"job {job_id} changed state meanwhile; try again")
        return row_to_job(row)

    async def _jobs_by_ids(self, conn: AsyncConnection, ids: Sequence[int]) -> list[Job]:
        rows = (await conn.execute(select(jobs).where(jobs.c.id.in_(list(ids))))).all()
        by_id = {r.id: row_to_job(r) for r in rows}
        return [by_id[i] for i in ids if i in by_id]

    async def job_get(self, job_id: int) -> Job:
        async with self._read() as conn:
            row = (await conn.execute(select(jobs).where(jobs.c.id == job_id))).first()
        if row is None:
            raise NotFound(f"job {job_id} does not exist", field="id")
        return row_to_job(row)

    async def job_attempts(self, job_id: int) -> list[Attempt]:
        async with self._read() as conn:
            rows = (
                await conn.execute(
                    select(attempts).where(attempts.c.job_id == job_id).order_by(attempts.c.id)
                )
            ).all()
        return [Attempt(**{k: v for k, v in r._asdict().items() if k != "id"}) for r in rows]

    async def job_list(self, flt: JobFilter) -> list[Job]:
        query = select(jobs).order_by(jobs.c.id.desc()).limit(flt.limit)
        conds = []
        if flt.queue:
            conds.append(jobs.c.queue == flt.queue)
        if flt.states:
            conds.append(jobs.c.state.in_(flt.states))
        if flt.type:
            conds.append(jobs.c.type == flt.type)
        for name, value in flt.labels.items():
            conds.append(jobs.c.labels[name].as_string() == value)
        if flt.after_id is not None:
            conds.append(jobs.c.id < flt.after_id)
        if conds:
            query = query.where(and_(*conds))
        async with self._read() as conn:
            return [row_to_job(r) for r in (await conn.execute(query)).all()]

    async def _locked(self, conn: AsyncConnection, job_id: int) -> Job:
        query = select(jobs).where(jobs.c.id == job_id)
        if self.dialect == "postgresql":
            query = query.with_for_update()
        row = (await conn.execute(query)).first()
        if row is None:
            raise NotFound(f"job {job_id} does not exist", field="id")
        return row_to_job(row)

    async def job_cancel(self, job_id: int, now: datetime) -> Job:
        """Cancel a scheduled job now; ask the loop to cancel one in flight."""
        async with self._write() as conn:
            job = await self._locked(conn, job_id)
            if job.state == State.SCHEDULED:
                return await self._update_guarded(
                    conn,
                    job_id,
                    State.SCHEDULED,
                    {
                        "state": State.CANCELLED.value,
                        "finished_at": now,
                        "updated_at": now,
                        "waiting_reason": None,
                    },
                )
            if job.state in IN_FLIGHT:
                await conn.execute(
                    update(jobs)
                    .where(jobs.c.id == job_id)
                    .values(cancel_requested=True, updated_at=now)
                )
                await self._notify(conn, {dialects.CANCEL_PREFIX + job.queue})
                return await self._locked(conn, job_id)
            raise Conflict(
                f"job {job_id} is {job.state}; only open jobs can be cancelled", field="state"
            )

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
            job = await self._locked(conn, job_id)
            if resolve is not None:
                changes = resolve(job)
            if job.state != State.SCHEDULED:
                raise Conflict(
                    f"job {job_id} is {job.state}; only scheduled jobs can be changed",
                    field="state",
                )
            job = await self._update_guarded(
                conn,
                job_id,
                State.SCHEDULED,
                {**changes, "updated_at": now, "waiting_reason": None},
            )
            await self._notify(conn, {job.queue})
            return job

    async def job_retry(self, job_id: int, now: datetime, run_at: datetime | None = None) -> Job:
        """An operator's retry of a failed or cancelled job: it runs again as a new attempt."""
        try:
            async with self._write() as conn:
                job = await self._locked(conn, job_id)
                if job.state not in (State.FAILED, State.CANCELLED):
                    raise Conflict(
                        f"job {job_id} is {job.state}; "
                        "only failed or cancelled jobs can be retried",
                        field="state",
                    )
                check_transition(job.state, State.SCHEDULED)
                job = await self._update_guarded(
                    conn,
                    job_id,
                    job.state,
                    {
                        "state": State.SCHEDULED.value,
                        "run_at": run_at or now,
                        "finished_at": None,
                        "updated_at": now,
                        "cancel_requested": False,
                        "waiting_reason": None,
                    },
                )
                await self._notify(conn, {job.queue})
                return job
        except IntegrityError as exc:
            raise _conflict_from(exc) from None

    # -- queues ---------------------------------------------------------------------

    async def queue_counts(self, queue: str, now: datetime) -> QueueCounts:
        async with self._read() as conn:
            rows = (
                await conn.execute(
                    select(jobs.c.state, func.count(), func.coalesce(func.sum(jobs.c.weight), 0))
                    .where(jobs.c.queue == queue, jobs.c.state.in_([*_OPEN, State.FAILED.value]))
                    .group_by(jobs.c.state)
                )
            ).all()
            due = (
                await conn.execute(
                    select(func.count()).where(
                        jobs.c.queue == queue,
                        jobs.c.state == _SCHEDULED,
                        jobs.c.run_at <= now,
                    )
                )
            ).scalar_one()
            q = (await conn.execute(select(queues).where(queues.c.name == queue))).first()
        counts = {r[0]: (r[1], r[2]) for r in rows}
        live = q is not None and q.lease_expires_at is not None and q.lease_expires_at > now
        return QueueCounts(
            scheduled=counts.get("scheduled", (0, 0))[0],
            due=due,
            running=counts.get("running", (0, 0))[0],
            awaiting=counts.get("awaiting", (0, 0))[0],
            failed=counts.get("failed", (0, 0))[0],
            weight_in_flight=sum(counts.get(s, (0, 0))[1] for s in _IN_FLIGHT),
            paused=bool(q and q.paused),
            lease_owner=q.lease_owner if live else None,
            stats=(q.stats or {}) if q is not None and live else {},
        )

    async def _queue_row(self, conn: AsyncConnection, queue: str) -> None:
        await conn.execute(
            dialects.dialect_insert(conn, queues)
            .values(name=queue, paused=False, lease_token=0)
            .on_conflict_do_nothing()
        )

    async def queue_set_paused(self, queue: str, paused: bool) -> None:
        async with self._write() as conn:
            await self._queue_row(conn, queue)
            await conn.execute(update(queues).where(queues.c.name == queue).values(paused=paused))
            await self._notify(conn, {queue})

    async def lease_acquire(self, queue: str, owner: str, now: datetime, ttl: float) -> int | None:
        """Take the queue's lease if it is free or expired; the new fencing token, or None."""
        async with self._write() as conn:
            await self._queue_row(conn, queue)
            stmt = (
                update(queues)
                .where(
                    queues.c.name == queue,
                    (queues.c.lease_owner.is_(None))
                    | (queues.c.lease_expires_at < now)
                    | (queues.c.lease_owner == owner),
                )
                .values(
                    lease_owner=owner,
                    lease_token=queues.c.lease_token + 1,
                    lease_expires_at=now + timedelta(seconds=ttl),
                )
                .returning(queues.c.lease_token)
            )
            return (await conn.execute(stmt)).scalar_one_or_none()

    async def lease_clear_all(self) -> None:
        """Forget every lease (SQLite only: the file lock proves no other process runs)."""
        async with self._write() as conn:
            await conn.execute(update(queues).values(lease_owner=None, lease_expires_at=None))

    async def lease_release(self, queue: str, owner: str, token: int) -> None:
        async with self._write() as conn:
            await conn.execute(
                update(queues)
                .where(
                    queues.c.name == queue,
                    queues.c.lease_owner == owner,
                    queues.c.lease_token == token,
                )
                .values(lease_owner=None, lease_expires_at=None)
            )

    # -- the responses inbox ------------------------------------------------------------

    async def response_insert_many(
        self,
        new: Sequence[NewResponse],
        now: datetime,
        ttl: float,
        parked: Sequence[ParkedMessage] = (),
    ) -> list[int]:
        """Store responses (and parked messages) durably, in one transaction."""
        expires = now + timedelta(seconds=ttl)
        ids: list[int] = []
        async with self._write() as conn:
            if new:
                rows = [
                    {
                        **asdict(r),
                        "received_at": now,
                        "expires_at": expires,
                        "status": "pending",
                        "job_id": None,
                        "forced_job_id": None,
                        "settled_at": None,
                    }
                    for r in new
                ]
                stmt = responses.insert().returning(responses.c.id, sort_by_parameter_order=True)
                ids = list((await conn.execute(stmt, rows)).scalars().all())
                await self._notify(conn, {dialects.ALL_QUEUES})
            if parked:
                await conn.execute(
                    parked_messages.insert(), [{**asdict(p), "received_at": now} for p in parked]
                )
        return ids

    async def response_get(self, response_id: int) -> Response:
        async with self._read() as conn:
            row = (
                await conn.execute(select(responses).where(responses.c.id == response_id))
            ).first()
        if row is None:
            raise NotFound(f"response {response_id} does not exist", field="id")
        return Response(**row._asdict())

    async def response_list(
        self,
        statuses: Sequence[str] = (),
        correlation_key: str | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[Response]:
        query = select(responses).order_by(responses.c.id.desc()).limit(limit)
        if statuses:
            query = query.where(responses.c.status.in_(list(statuses)))
        if correlation_key is not None:
            query = query.where(responses.c.correlation_key == correlation_key)
        if after_id is not None:
            query = query.where(responses.c.id < after_id)
        async with self._read() as conn:
            return [Response(**r._asdict()) for r in (await conn.execute(query)).all()]

    async def response_force_match(self, response_id: int, job_id: int, now: datetime) -> Response:
        """An operator pairs an unmatched response with an in-flight job by hand."""
        async with self._write() as conn:
            row = (
                await conn.execute(select(responses).where(responses.c.id == response_id))
            ).first()
            if row is None:
                raise NotFound(f"response {response_id} does not exist", field="id")
            if row.status not in ("pending", "expired", "late"):
                raise Conflict(f"response {response_id} is {row.status}", field="id")
            job = await self._locked(conn, job_id)
            if job.state not in IN_FLIGHT:
                raise Conflict(
                    f"job {job_id} is {job.state}; a response can settle only a running or "
                    "awaiting job",
                    field="job_id",
                )
            await conn.execute(
                update(responses)
                .where(responses.c.id == response_id)
                .values(
                    status="pending",
                    forced_job_id=job_id,
                    expires_at=max(row.expires_at, now + timedelta(hours=1)),
                )
            )
            await self._notify(conn, {dialects.ALL_QUEUES})  # look at the inbox
        return await self.response_get(response_id)

    async def parked_list(
        self, after_id: int | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        query = select(parked_messages).order_by(parked_messages.c.id.desc()).limit(limit)
        if after_id is not None:
            query = query.where(parked_messages.c.id < after_id)
        async with self._read() as conn:
            return [r._asdict() for r in (await conn.execute(query)).all()]

    async def response_classify(self, now: datetime, limit: int = 1000) -> dict[str, int]:
        """Upkeep: settle the inbox rows no open job will ever match.

        duplicate: the key's job already has a matched response; late: the key's job
        is finished without one (timed out, cancelled, failed); expired: past the TTL
        with no job at all. Early responses (the job is still scheduled) stay pending.
        """
        counts = {"duplicate": 0, "late": 0, "expired": 0}
        async with self._write() as conn:
            pending = (
                await conn.execute(
                    select(responses.c.id, responses.c.correlation_key, responses.c.expires_at)
                    .where(responses.c.status == _PENDING, responses.c.forced_job_id.is_(None))
                    .order_by(responses.c.id)
                    .limit(limit)
                )
            ).all()
            if not pending:
                return counts
            keys = list({r.correlation_key for r in pending})
            job_rows = (
                await conn.execute(
                    select(jobs.c.id, jobs.c.correlation_key, jobs.c.state).where(
                        jobs.c.correlation_key.in_(keys)
                    )
                )
            ).all()
            open_keys = {r.correlation_key for r in job_rows if r.state in _OPEN}
            finished = {r.correlation_key: r.id for r in job_rows if r.state not in _OPEN}
            matched_jobs = (
                set(
                    (
                        await conn.execute(
                            select(responses.c.job_id).where(
                                responses.c.status == "matched",
                                responses.c.job_id.in_(list(finished.values())),
                            )
                        )
                    )
                    .scalars()
                    .all()
                )
                if finished
                else set()
            )
            settled: list[dict[str, Any]] = []
            for r in pending:
                if r.correlation_key in open_keys:
                    continue  # early, or about to be matched by the loop
                if r.correlation_key in finished:
                    job_id = finished[r.correlation_key]
                    status = "duplicate" if job_id in matched_jobs else "late"
                elif r.expires_at <= now:
                    status, job_id = "expired", None
                else:
                    continue  # unknown key: kept until its TTL
                settled.append({"b_id": r.id, "status": status, "job_id": job_id})
                counts[status] += 1
            if settled:
                await conn.execute(
                    update(responses)
                    .where(responses.c.id == _bind("b_id"))
                    .values(status=_bind("status"), job_id=_bind("job_id"), settled_at=now),
                    settled,
                )
        return counts

    async def response_prune(self, before: datetime) -> int:
        """Delete settled inbox rows and parked messages older than ``before``."""
        async with self._write() as conn:
            done = await conn.execute(
                delete(responses).where(
                    responses.c.status != "pending", responses.c.received_at < before
                )
            )
            await conn.execute(
                delete(parked_messages).where(parked_messages.c.received_at < before)
            )
        return done.rowcount or 0

    async def job_prune(self, state: State, finished_before: datetime, limit: int = 5000) -> int:
        """Delete up to ``limit`` jobs in the finished ``state`` that finished before
        ``finished_before``, with their attempts, oldest ids first; how many."""
        if state not in TERMINAL:
            raise ValueError(f"only finished jobs are pruned, not {state.value}")
        async with self._write() as conn:
            query = (
                select(jobs.c.id)
                .where(jobs.c.state == _const(state.value), jobs.c.finished_at < finished_before)
                .order_by(jobs.c.id)
                .limit(limit)
            )
            if self.dialect == "postgresql":
                # A job being retried right now keeps its row and its attempts.
                query = query.with_for_update(skip_locked=True)
            ids = list((await conn.execute(query)).scalars())
            if ids:
                await conn.execute(delete(attempts).where(attempts.c.job_id.in_(ids)))
                await conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
        return len(ids)

    # -- the loop's side --------------------------------------------------------------

    async def job_in_flight(self, queue: str) -> list[Job]:
        async with self._read() as conn:
            rows = await conn.execute(
                select(jobs).where(jobs.c.queue == queue, jobs.c.state.in_(_IN_FLIGHT_SQL))
            )
            return [row_to_job(r) for r in rows.all()]

    async def job_note_oversized(self, queue: str, capacity: int) -> None:
        """Say why scheduled jobs heavier than the queue's whole capacity wait.

        The API refuses such jobs; they exist after an operator lowered the capacity,
        and a loop that reads only its free capacity's worth of due jobs skips them.
        """
        reason = literal("weight ", String) + cast(jobs.c.weight, String)
        async with self._write() as conn:
            await conn.execute(
                update(jobs)
                .where(
                    jobs.c.queue == queue,
                    jobs.c.state == _SCHEDULED,
                    jobs.c.weight > capacity,
                )
                .values(waiting_reason=reason + f" exceeds the capacity of {capacity}")
            )

    async def job_recent_starts(self, queue: str, since: datetime) -> list[Start]:
        """Starts since ``since`` (finished attempts and in-flight jobs), oldest first."""
        finished = (
            select(attempts.c.started_at.label("at"), jobs.c.labels, jobs.c.critical)
            .join(jobs, jobs.c.id == attempts.c.job_id)
            .where(jobs.c.queue == queue, attempts.c.started_at >= since)
        )
        in_flight = select(jobs.c.claimed_at.label("at"), jobs.c.labels, jobs.c.critical).where(
            jobs.c.queue == queue, jobs.c.state.in_(_IN_FLIGHT_SQL), jobs.c.claimed_at >= since
        )
        async with self._read() as conn:
            rows = (await conn.execute(finished.union_all(in_flight))).all()
        starts = (Start(at=r[0], labels=r[1] or {}, critical=bool(r[2])) for r in rows)
        return sorted(starts, key=lambda s: s.at)

    async def job_next_run_at(self, queue: str, after: datetime) -> datetime | None:
        async with self._read() as conn:
            return (
                await conn.execute(
                    select(func.min(jobs.c.run_at)).where(
                        jobs.c.queue == queue,
                        jobs.c.state == _SCHEDULED,
                        jobs.c.run_at > after,
                    )
                )
            ).scalar_one_or_none()

    @asynccontextmanager
    async def queue_batch(
        self, queue: str, owner: str, token: int, now: datetime, ttl: float
    ) -> AsyncIterator[QueueBatch]:
        """One transaction of a queue's loop, fenced by its lease token.

        The fence is the first statement: if another process took the lease, this
        raises ``LeaseLost`` and nothing of the batch is written. On PostgreSQL the
        fence also row-locks the queue, so a takeover waits for this commit.
        """
        async with self._write() as conn:
            fence = (
                update(queues)
                .where(
                    queues.c.name == queue,
                    queues.c.lease_owner == owner,
                    queues.c.lease_token == token,
                )
                .values(lease_expires_at=now + timedelta(seconds=ttl))
                .returning(queues.c.paused)
            )
            paused = (await conn.execute(fence)).scalar_one_or_none()
            if paused is None:
                raise LeaseLost(queue)
            yield QueueBatch(conn, queue, bool(paused))


class QueueBatch:
    """The writes of one tick of a queue's loop, all inside one transaction."""

    def __init__(self, conn: AsyncConnection, queue: str, paused: bool) -> None:
        self.conn, self.queue, self.paused = conn, queue, paused

    async def job_settle(self, settlements: Sequence[Settlement], now: datetime) -> None:
        if not settlements:
            return
        if self.conn.dialect.name == "postgresql":
            await dialects.settle_unnest(self.conn, settlements, now)
            return
        stmt = (
            update(jobs)
            .where(
                jobs.c.id == _bind("b_id"),
                jobs.c.attempt == _bind("b_attempt"),
                _IS_IN_FLIGHT,
            )
            .values(
                state=_bind("state"),
                run_at=_bind("run_at"),
                payload=_bind("payload"),
                finished_at=_bind("finished_at"),
                result=_bind("result"),
                last_error=_bind("last_error"),
                deadline=None,
                cancel_requested=False,
                updated_at=now,
            )
        )
        params = [
            {
                "b_id": s.job_id,
                "b_attempt": s.attempt,
                "state": s.state.value,
                "run_at": s.run_at,
                "payload": s.payload,
                "finished_at": s.finished_at,
                "result": s.result,
                "last_error": s.last_error,
            }
            for s in settlements
        ]
        await self.conn.execute(stmt, params)
        # Plain dicts by hand: dataclasses.asdict deep-copies every response body.
        records = [
            {
                "job_id": r.job_id,
                "attempt": r.attempt,
                "started_at": r.started_at,
                "finished_at": r.finished_at,
                "outcome": r.outcome,
                "error": r.error,
                "response": r.response,
            }
            for s in settlements
            if (r := s.record) is not None
        ]
        if records:
            await self.conn.execute(attempts.insert(), records)

    async def job_due(
        self,
        now: datetime,
        limit: int,
        order: str,
        aging: float | None = None,
        max_weight: int | None = None,
        label: str | None = None,
        value: str | None = None,
        other_than: Sequence[str] = (),
    ) -> list[Job]:
        """Due jobs in queue order, none heavier than ``max_weight`` if given.

        With ``label``: only jobs whose label is ``value``, or, with ``value`` None,
        only jobs whose label is missing or not one of ``other_than``.

        The order is ``hipq.queue_order``'s; with aging no index serves it: the
        database sorts all due jobs of the queue each tick."""
        keys = order_key(
            order,
            aging,
            run_at=jobs.c.run_at,
            priority=jobs.c.priority,
            id=jobs.c.id,
            epoch=dialects.epoch_seconds(self.conn, jobs.c.run_at),
        )
        query = (
            select(jobs)
            .where(
                jobs.c.queue == self.queue,
                jobs.c.state == _SCHEDULED,
                jobs.c.run_at <= now,
            )
            .order_by(*keys)
            .limit(limit)
        )
        if max_weight is not None:
            query = query.where(jobs.c.weight <= max_weight)
        if label is not None:
            found = jobs.c.labels[label].as_string()
            if value is not None:
                query = query.where(found == value)
            elif other_than:
                query = query.where(found.is_(None) | found.not_in(list(other_than)))
        rows = await self.conn.execute(dialects.lock_due(self.conn, query))
        return [row_to_job(r) for r in rows.all()]

    async def job_claim(self, admitted: Sequence[Job], now: datetime) -> list[Job]:
        """scheduled -> running for ``admitted`` (rows the due scan locked in this transaction)."""
        by_timeout: dict[float, list[int]] = defaultdict(list)
        for job in admitted:
            by_timeout[job.timeout_seconds].append(job.id)
        for timeout, ids in by_timeout.items():
            await self.conn.execute(
                update(jobs)
                .where(dialects.id_in(self.conn, jobs.c.id, ids), jobs.c.state == _SCHEDULED)
                .values(
                    state=State.RUNNING.value,
                    attempt=jobs.c.attempt + 1,
                    claimed_at=now,
                    deadline=now + timedelta(seconds=timeout),
                    waiting_reason=None,
                    updated_at=now,
                )
            )
        return [
            j._replace(
                state=State.RUNNING,
                attempt=j.attempt + 1,
                claimed_at=now,
                deadline=now + timedelta(seconds=j.timeout_seconds),
                waiting_reason=None,
                updated_at=now,
            )
            for j in admitted
        ]

    async def job_defer(self, deferred: dict[int, datetime], reason: str, now: datetime) -> None:
        if not deferred:
            return
        await self.conn.execute(
            update(jobs)
            .where(jobs.c.id == _bind("b_id"), jobs.c.state == _SCHEDULED)
            .values(run_at=_bind("run_at"), waiting_reason=reason, updated_at=now),
            [{"b_id": i, "run_at": at} for i, at in deferred.items()],
        )

    async def job_note_waiting(self, reasons: dict[int, str]) -> None:
        """Record why held jobs wait; callers pass only the reasons that changed."""
        grouped: dict[str, list[int]] = defaultdict(list)
        for job_id, reason in reasons.items():
            grouped[reason].append(job_id)
        for reason, ids in grouped.items():
            await self.conn.execute(
                update(jobs)
                .where(jobs.c.id.in_(ids), jobs.c.state == _SCHEDULED)
                .values(waiting_reason=reason[:500])
            )

    async def job_mark_awaiting(self, items: Sequence[tuple[int, int]], now: datetime) -> None:
        """running -> awaiting for (job id, attempt) pairs whose request was sent."""
        if not items:
            return
        await self.conn.execute(
            update(jobs)
            .where(
                jobs.c.id == _bind("b_id"),
                jobs.c.attempt == _bind("b_attempt"),
                jobs.c.state == _RUNNING,
            )
            .values(state=State.AWAITING.value, updated_at=now),
            [{"b_id": i, "b_attempt": a} for i, a in items],
        )

    async def job_extend_deadlines(self, deadlines: dict[int, datetime]) -> None:
        if deadlines:
            await self.conn.execute(
                update(jobs)
                .where(jobs.c.id == _bind("b_id"), _IS_IN_FLIGHT)
                .values(deadline=_bind("deadline")),
                [{"b_id": i, "deadline": d} for i, d in deadlines.items()],
            )

    async def job_set_payloads(self, payloads: dict[int, dict[str, Any]]) -> None:
        """Checkpoints of in-flight jobs: a retry starts from the saved payload."""
        if payloads:
            await self.conn.execute(
                update(jobs)
                .where(jobs.c.id == _bind("b_id"), _IS_IN_FLIGHT)
                .values(payload=_bind("payload")),
                [{"b_id": i, "payload": p} for i, p in payloads.items()],
            )

    async def response_match(
        self, signed_types: Sequence[str] = (), limit: int = 1000
    ) -> tuple[list[Match], list[int]]:
        """Pending responses whose job is in flight in this queue.

        A job of a type in ``signed_types`` matches only responses whose signature was
        verified for that type (callbacks with ``?type=``), so an unsigned callback
        cannot settle it. Returns the matches (the first response per job) and the ids
        of further responses for a job matched in this batch (duplicates).
        """
        by_key = (
            select(responses, jobs.c.id.label("matched_job"))
            .join(jobs, jobs.c.correlation_key == responses.c.correlation_key)
            .where(
                responses.c.status == _PENDING,
                responses.c.forced_job_id.is_(None),
                jobs.c.queue == self.queue,
                jobs.c.state.in_(_IN_FLIGHT_SQL),
            )
        )
        if signed_types:
            by_key = by_key.where(
                jobs.c.type.not_in(list(signed_types)) | (responses.c.job_type == jobs.c.type)
            )
        by_hand = (
            select(responses, jobs.c.id.label("matched_job"))
            .join(jobs, jobs.c.id == responses.c.forced_job_id)
            .where(
                responses.c.status == _PENDING,
                jobs.c.queue == self.queue,
                jobs.c.state.in_(_IN_FLIGHT_SQL),
            )
        )
        rows = (await self.conn.execute(by_key.union_all(by_hand).limit(limit))).all()
        matches: list[Match] = []
        extra: list[int] = []
        seen: set[int] = set()
        for row in sorted(rows, key=lambda r: r.id):
            data = row._asdict()
            job_id = data.pop("matched_job")
            if job_id in seen:
                extra.append(data["id"])
                continue
            seen.add(job_id)
            matches.append(Match(Response(**data), job_id))
        return matches, extra

    async def response_mark(
        self, matched: Sequence[tuple[int, int]], duplicates: Sequence[int], now: datetime
    ) -> None:
        if matched:
            await self.conn.execute(
                update(responses)
                .where(responses.c.id == _bind("b_id"), responses.c.status == _PENDING)
                .values(status="matched", job_id=_bind("job_id"), settled_at=now),
                [{"b_id": r, "job_id": j} for r, j in matched],
            )
        if duplicates:
            await self.conn.execute(
                update(responses)
                .where(responses.c.id.in_(list(duplicates)), responses.c.status == _PENDING)
                .values(status="duplicate", settled_at=now)
            )

    async def response_accept_late(
        self, types: Sequence[str], now: datetime, limit: int = 1000
    ) -> list[int]:
        """Complete failed or cancelled jobs of ``types`` with their late successful
        responses (upkeep marked them late with the job's id). Returns the job ids."""
        rows = (
            await self.conn.execute(
                select(
                    responses.c.id,
                    responses.c.body,
                    jobs.c.id.label("job"),
                    jobs.c.attempt,
                    jobs.c.claimed_at,
                    jobs.c.state,
                )
                .join(jobs, jobs.c.id == responses.c.job_id)
                .where(
                    responses.c.status == "late",
                    responses.c.succeeded.is_(True),
                    jobs.c.queue == self.queue,
                    jobs.c.type.in_(list(types)),
                    jobs.c.state.in_([State.FAILED.value, State.CANCELLED.value]),
                )
                .order_by(responses.c.id)
                .limit(limit)
            )
        ).all()
        done: list[int] = []
        for row in rows:
            if row.job in done:
                continue
            check_transition(row.state, State.COMPLETED)
            changed = await self.conn.execute(
                update(jobs)
                .where(jobs.c.id == row.job, jobs.c.state == row.state)
                .values(
                    state=State.COMPLETED.value,
                    result=row.body,
                    finished_at=now,
                    updated_at=now,
                    last_error=None,
                )
            )
            if changed.rowcount != 1:
                continue
            await self.conn.execute(
                attempts.insert().values(
                    job_id=row.job,
                    attempt=row.attempt,
                    started_at=row.claimed_at,
                    finished_at=now,
                    outcome="completed",
                    error="late response accepted",
                    response=row.body,
                )
            )
            await self.conn.execute(
                update(responses)
                .where(responses.c.id == row.id)
                .values(status="matched", settled_at=now)
            )
            done.append(row.job)
        return done

    async def job_keys_in_use(self, keys: dict[int, str]) -> dict[int, str]:
        """Of ``keys`` (job id -> key), those another open job already holds, or that
        an earlier job of the same batch takes: job id -> why."""
        taken: dict[int, str] = {}
        first: dict[str, int] = {}
        for job_id, key in keys.items():
            if key in first:
                taken[job_id] = f"correlation key {key!r} is built by job {first[key]} too"
            first.setdefault(key, job_id)
        if not first:
            return taken
        rows = await self.conn.execute(
            select(jobs.c.id, jobs.c.correlation_key).where(
                jobs.c.correlation_key.in_(list(first)), jobs.c.state.in_(_OPEN_SQL)
            )
        )
        for holder, key in rows.all():
            job_id = first[key]
            if holder != job_id:
                taken[job_id] = f"correlation key {key!r} is used by open job {holder}"
        return taken

    async def job_set_correlation_keys(self, keys: dict[int, str]) -> None:
        """Keys built at dispatch (templates using the job id or attempt)."""
        if keys:
            await self.conn.execute(
                update(jobs).where(jobs.c.id == _bind("b_id")).values(correlation_key=_bind("key")),
                [{"b_id": i, "key": k} for i, k in keys.items()],
            )

    async def queue_write_stats(self, stats: dict[str, Any]) -> None:
        await self.conn.execute(
            update(queues).where(queues.c.name == self.queue).values(stats=stats)
        )

    async def job_cancel_requests(self) -> list[int]:
        rows = await self.conn.execute(
            select(jobs.c.id).where(
                jobs.c.queue == self.queue,
                jobs.c.cancel_requested.is_(True),
                jobs.c.state.in_(_IN_FLIGHT_SQL),
            )
        )
        return list(rows.scalars().all())


def _bind(name: str) -> Any:
    from sqlalchemy import bindparam

    return bindparam(name)
