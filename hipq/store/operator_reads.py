"""The reads of the operator's dashboard, each bounded by an index.

A dashboard page must stay fast with millions of rows, so none of these reads
counts or scans a whole table:

- the job list pages by id windows on the primary key (``JOB_WINDOW`` ids at a
  time) unless an index serves the filter itself (a correlation key; one state);
  a time range becomes an id range first, by a binary search over the primary key
  (ids grow with ``created_at``);
- the failed page groups only the newest ``FAILED_SAMPLE`` failed jobs
  (``ix_hipq_jobs_state``);
- the charts count the attempts that started within the last hour
  (``ix_hipq_attempts_started``);
- execution times are those of the newest ``DURATION_SAMPLE`` attempts that started
  within the period asked for (``ix_hipq_attempts_started`` again);
- the jobs suggested for a response matched by hand are the newest
  ``CANDIDATE_SAMPLE`` jobs of each in-flight state (``ix_hipq_jobs_state``) and the
  open jobs whose key sorts beside the response's (the open-key index), at most
  ``CANDIDATE_SAMPLE`` of them;
- waiting reasons are those of the next ``REASON_SAMPLE`` due jobs in queue order
  (the due-scan index);
- what is being run now is the newest ``BUSY_SAMPLE`` running jobs, and the pull
  workers' claims of the newest ``BUSY_SAMPLE`` awaiting jobs (``ix_hipq_jobs_state``).

The statement builders are module functions so that a test can show each plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, case, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.store.labels import label_value
from hipq.store.records import Response
from hipq.store.rows import row_to_job
from hipq.store.schema import attempts, jobs, pull_claims, responses
from hipq.store.state_guards import IN_FLIGHT_VALUES, OPEN_SQL, SCHEDULED_SQL, const
from hipq.store.transactions import Transactions

# Ids one page of the job list examines when no index serves its filter.
JOB_WINDOW = 20_000
# The failed jobs the failed page groups by error: the newest ones.
FAILED_SAMPLE = 10_000
# Due jobs whose waiting reasons the overview tallies: those the loop reads first.
REASON_SAMPLE = 1_000
# Attempts whose durations the execution-time statistics read: the newest ones.
DURATION_SAMPLE = 20_000
# In-flight jobs of each state, and open keys beside a response's, read for suggestions.
CANDIDATE_SAMPLE = 500
# Running jobs, and awaiting ones looked at for a pull worker's claim, that the
# processes page shows (the newest of each).
BUSY_SAMPLE = 200
# A time range's id bounds are searched this much wider than asked, then filtered
# exactly: concurrent inserts may commit ids a few milliseconds out of time order.
TIME_SLACK = timedelta(seconds=1)
_NEVER = datetime.max.replace(tzinfo=UTC)
# Characters of an error that name its group on the failed page.
ERROR_GROUP_CHARS = 160


@dataclass(frozen=True, slots=True)
class JobQuery:
    """The job list's filters; every field is optional."""

    queue: str | None = None
    states: tuple[str, ...] = ()
    type: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    job_key: str | None = None
    correlation_key: str | None = None
    created_since: datetime | None = None
    created_until: datetime | None = None
    before_id: int | None = None  # the cursor: jobs with a smaller id (newest first)
    retrying: bool = False  # scheduled again after a failed attempt
    limit: int = 50


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[Job]
    next_cursor: int | None  # pass as ``before_id`` for the next (older) page
    # The ids this page examined when it paged by windows, newest first; None when
    # an index served the filter itself.
    searched: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class ErrorGroup:
    error: str  # the first ERROR_GROUP_CHARS characters of the first line
    count: int
    queues: tuple[str, ...]
    types: tuple[str, ...]
    newest_id: int
    job_ids: tuple[int, ...]  # newest first


@dataclass(frozen=True, slots=True)
class AttemptDuration:
    type: str
    outcome: str
    seconds: float


@dataclass(frozen=True, slots=True)
class KeyedJob:
    """An open job as a response's candidate: what a match by hand needs to know."""

    id: int
    correlation_key: str | None
    type: str
    state: str


@dataclass(frozen=True, slots=True)
class BusyJob:
    """A job being run now: by a process (``running``: sent by its queue's owner, or by
    the process it was handed to, ``executor``) or by a pull worker (``worker``)."""

    id: int
    type: str
    queue: str
    claimed_at: datetime | None
    executor: str | None = None
    worker: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptBucket:
    queue: str
    outcome: str
    bucket: int  # 0 = the oldest slice of the period
    count: int


def _indexed_alone(q: JobQuery) -> bool:
    """Whether an index serves the whole filter without id windows."""
    if q.correlation_key is not None:
        return True
    return len(q.states) == 1 and not (
        q.queue
        or q.type
        or q.labels
        or q.job_key
        or q.created_since
        or q.created_until
        or q.retrying
    )


def job_page_query(q: JobQuery, low: int | None, high: int | None) -> Select[Any]:
    """The job list's statement: newest first, ids in [low, high) when given."""
    conds: list[Any] = []
    if q.queue:
        conds.append(jobs.c.queue == q.queue)
    if q.states:
        conds.append(jobs.c.state.in_(q.states))
    if q.type:
        conds.append(jobs.c.type == q.type)
    for name, value in q.labels.items():
        conds.append(label_value(jobs.c.labels, name) == value)
    if q.job_key is not None:
        conds.append(jobs.c.job_key == q.job_key)
    if q.correlation_key is not None:
        conds.append(jobs.c.correlation_key == q.correlation_key)
    if q.retrying:
        conds += [jobs.c.state == SCHEDULED_SQL, jobs.c.attempt > 0]
    if q.created_since is not None:
        conds.append(jobs.c.created_at >= q.created_since)
    if q.created_until is not None:
        conds.append(jobs.c.created_at <= q.created_until)
    if q.before_id is not None:
        conds.append(jobs.c.id < q.before_id)
    if low is not None:
        conds.append(jobs.c.id >= low)
    if high is not None:
        conds.append(jobs.c.id < high)
    query = select(jobs).order_by(jobs.c.id.desc()).limit(q.limit)
    return query.where(and_(*conds)) if conds else query


def id_at_or_after_query(guess: int) -> Select[Any]:
    return (
        select(jobs.c.id, jobs.c.created_at).where(jobs.c.id >= guess).order_by(jobs.c.id).limit(1)
    )


def max_id_query() -> Select[Any]:
    return select(func.max(jobs.c.id))


def failed_sample_query(limit: int = FAILED_SAMPLE) -> Select[Any]:
    return (
        select(jobs.c.id, jobs.c.queue, jobs.c.type, jobs.c.last_error)
        .where(jobs.c.state == const("failed"))
        .order_by(jobs.c.id.desc())
        .limit(limit)
    )


def attempt_buckets_query(since: datetime, until: datetime, buckets: int) -> Select[Any]:
    """Attempts that started in [since, until), by queue, outcome and time slice."""
    step = (until - since) / buckets
    bucket = case(
        *[(attempts.c.started_at < since + step * (i + 1), i) for i in range(buckets - 1)],
        else_=buckets - 1,
    ).label("bucket")
    return (
        select(jobs.c.queue, attempts.c.outcome, bucket, func.count().label("n"))
        .select_from(attempts.join(jobs, jobs.c.id == attempts.c.job_id))
        .where(attempts.c.started_at >= since, attempts.c.started_at < until)
        .group_by(jobs.c.queue, attempts.c.outcome, bucket)
    )


def attempt_durations_query(
    since: datetime, until: datetime, limit: int = DURATION_SAMPLE
) -> Select[Any]:
    """The newest ``limit`` attempts that started in [since, until), with their job's
    type: the execution times are computed from them in Python, the same on both
    engines (SQLite has no percentile function)."""
    return (
        select(jobs.c.type, attempts.c.outcome, attempts.c.started_at, attempts.c.finished_at)
        .select_from(attempts.join(jobs, jobs.c.id == attempts.c.job_id))
        .where(attempts.c.started_at >= since, attempts.c.started_at < until)
        .order_by(attempts.c.started_at.desc())
        .limit(limit)
    )


def due_reasons_query(queue: str, now: datetime, limit: int = REASON_SAMPLE) -> Select[Any]:
    """Waiting reasons of the queue's first due jobs, in time-priority order."""
    first = (
        select(jobs.c.waiting_reason)
        .where(jobs.c.queue == queue, jobs.c.state == SCHEDULED_SQL, jobs.c.run_at <= now)
        .order_by(jobs.c.run_at, jobs.c.priority, jobs.c.id)
        .limit(limit)
        .subquery()
    )
    return (
        select(first.c.waiting_reason, func.count().label("n"))
        .where(first.c.waiting_reason.is_not(None))
        .group_by(first.c.waiting_reason)
    )


def open_keys_query(keys: Sequence[str]) -> Select[Any]:
    """Which of ``keys`` an open job holds (the unique index of open correlation keys)."""
    return select(jobs.c.correlation_key, jobs.c.id).where(
        jobs.c.correlation_key.in_(list(keys)),
        jobs.c.correlation_key.is_not(None),
        jobs.c.state.in_(OPEN_SQL),
    )


_KEYED = (jobs.c.id, jobs.c.correlation_key, jobs.c.type, jobs.c.state)


def newest_in_state_query(state: str, limit: int = CANDIDATE_SAMPLE) -> Select[Any]:
    return (
        select(*_KEYED).where(jobs.c.state == const(state)).order_by(jobs.c.id.desc()).limit(limit)
    )


def keys_from_query(low: str, limit: int = CANDIDATE_SAMPLE) -> Select[Any]:
    """Open jobs whose key sorts at or after ``low``, in key order. PostgreSQL reads the
    open-key index in order and stops at ``limit``; SQLite's planner (without table
    statistics) prefers the state index and sorts the open jobs."""
    return (
        select(*_KEYED)
        .where(
            jobs.c.correlation_key >= low,
            jobs.c.correlation_key.is_not(None),
            jobs.c.state.in_(OPEN_SQL),
        )
        .order_by(jobs.c.correlation_key)
        .limit(limit)
    )


def key_responses_query(correlation_key: str, limit: int = 50) -> Select[Any]:
    return (
        select(responses)
        .where(responses.c.correlation_key == correlation_key)
        .order_by(responses.c.id.desc())
        .limit(limit)
    )


def busy_running_query(limit: int = BUSY_SAMPLE) -> Select[Any]:
    """The newest ``limit`` running jobs (``ix_hipq_jobs_state``)."""
    return (
        select(jobs.c.id, jobs.c.type, jobs.c.queue, jobs.c.claimed_at, jobs.c.executor)
        .where(jobs.c.state == const(State.RUNNING.value))
        .order_by(jobs.c.id.desc())
        .limit(limit)
    )


def busy_pulled_query(limit: int = BUSY_SAMPLE) -> Select[Any]:
    """Of the newest ``limit`` awaiting jobs (``ix_hipq_jobs_state``), those a pull
    worker fetched in their current attempt (the claims' primary key)."""
    newest = (
        select(jobs.c.id, jobs.c.type, jobs.c.queue, jobs.c.claimed_at, jobs.c.attempt)
        .where(jobs.c.state == const(State.AWAITING.value))
        .order_by(jobs.c.id.desc())
        .limit(limit)
        .subquery()
    )
    return (
        select(newest.c.id, newest.c.type, newest.c.queue, pull_claims.c.fetched_at)
        .add_columns(pull_claims.c.worker)
        .select_from(
            newest.join(
                pull_claims,
                and_(
                    pull_claims.c.job_id == newest.c.id,
                    pull_claims.c.attempt == newest.c.attempt,
                ),
            )
        )
        .order_by(newest.c.id.desc())
    )


class OperatorReads(Transactions):
    async def job_busy(self) -> list[BusyJob]:
        """What is being run now: the newest running jobs and pull jobs a worker
        holds (``BUSY_SAMPLE`` of each at most), the longest running first."""
        async with self._read() as conn:
            running = (await conn.execute(busy_running_query())).all()
            pulled = (await conn.execute(busy_pulled_query())).all()
        found = [BusyJob(r.id, r.type, r.queue, r.claimed_at, executor=r.executor) for r in running]
        found += [BusyJob(r.id, r.type, r.queue, r.fetched_at, worker=r.worker) for r in pulled]
        return sorted(found, key=lambda j: (j.claimed_at or _NEVER, j.id))

    async def job_page(self, q: JobQuery) -> JobPage:
        """One page of the job list, newest first (see the module's note on windows)."""
        async with self._read() as conn:
            if _indexed_alone(q):
                rows = (await conn.execute(job_page_query(q, None, None))).all()
                found = [row_to_job(r) for r in rows]
                more = len(found) == q.limit
                return JobPage(found, found[-1].id if more else None)
            low, high = await self._id_range(conn, q)
            if q.before_id is not None:
                high = min(high, q.before_id)
            start = max(low, high - JOB_WINDOW)
            rows = (await conn.execute(job_page_query(q, start, high))).all()
        found = [row_to_job(r) for r in rows]
        if len(found) == q.limit:
            return JobPage(found, found[-1].id, (high - 1, start))
        return JobPage(found, start if start > low else None, (high - 1, start))

    async def _id_range(self, conn: AsyncConnection, q: JobQuery) -> tuple[int, int]:
        """[low, high) of the ids that can match ``q``'s time range."""
        top = (await conn.execute(max_id_query())).scalar_one_or_none()
        if top is None:
            return 1, 1
        low, high = 1, top + 1
        if q.created_since is not None:
            low = await self._first_id_since(conn, q.created_since - TIME_SLACK, top)
        if q.created_until is not None:
            high = await self._first_id_since(conn, q.created_until + TIME_SLACK, top)
        return low, max(low, high)

    async def _first_id_since(self, conn: AsyncConnection, when: datetime, top: int) -> int:
        """The smallest id created at or after ``when`` (``top`` + 1 if none): a
        binary search of point reads on the primary key."""
        lo, hi = 1, top + 1
        while lo < hi:
            mid = (lo + hi) // 2
            row = (await conn.execute(id_at_or_after_query(mid))).first()
            if row is None or row.created_at >= when:
                hi = mid
            else:
                lo = row.id + 1
        return lo

    async def job_error_groups(self, limit: int = FAILED_SAMPLE) -> tuple[list[ErrorGroup], int]:
        """The newest ``limit`` failed jobs grouped by error, largest group first, and
        how many failed jobs that sample holds."""
        async with self._read() as conn:
            rows = (await conn.execute(failed_sample_query(limit))).all()
        groups: dict[str, list[Any]] = {}
        for r in rows:
            text = (r.last_error or "(no error recorded)").strip().splitlines()[0]
            groups.setdefault(text[:ERROR_GROUP_CHARS], []).append(r)
        out = [
            ErrorGroup(
                error=error,
                count=len(members),
                queues=tuple(sorted({m.queue for m in members})),
                types=tuple(sorted({m.type for m in members})),
                newest_id=members[0].id,
                job_ids=tuple(m.id for m in members),
            )
            for error, members in groups.items()
        ]
        out.sort(key=lambda g: (-g.count, -g.newest_id))
        return out, len(rows)

    async def attempt_buckets(
        self, since: datetime, until: datetime, buckets: int
    ) -> list[AttemptBucket]:
        async with self._read() as conn:
            rows = (await conn.execute(attempt_buckets_query(since, until, buckets))).all()
        return [AttemptBucket(r.queue, r.outcome, int(r.bucket), int(r.n)) for r in rows]

    async def attempt_durations(
        self, since: datetime, until: datetime, limit: int = DURATION_SAMPLE
    ) -> list[AttemptDuration]:
        """How long each of the newest ``limit`` attempts started in [since, until)
        took, newest first."""
        async with self._read() as conn:
            rows = (await conn.execute(attempt_durations_query(since, until, limit))).all()
        return [
            AttemptDuration(
                r.type, r.outcome, max((r.finished_at - r.started_at).total_seconds(), 0)
            )
            for r in rows
        ]

    async def job_due_reasons(self, queue: str, now: datetime) -> list[tuple[str, int]]:
        """Why the queue's first due jobs wait: (reason, jobs), most common first."""
        async with self._read() as conn:
            rows = (await conn.execute(due_reasons_query(queue, now))).all()
        return sorted(((r[0], int(r[1])) for r in rows), key=lambda x: -x[1])

    async def job_open_keys(self, keys: Sequence[str]) -> dict[str, int]:
        """The open job holding each of ``keys`` that one holds: key -> job id."""
        if not keys:
            return {}
        async with self._read() as conn:
            rows = (await conn.execute(open_keys_query(keys))).all()
        return {r[0]: int(r[1]) for r in rows}

    async def job_in_flight_sample(self, limit: int = CANDIDATE_SAMPLE) -> list[KeyedJob]:
        """The newest ``limit`` running and the newest ``limit`` awaiting jobs."""
        async with self._read() as conn:
            rows = [
                r
                for state in IN_FLIGHT_VALUES
                for r in (await conn.execute(newest_in_state_query(state, limit))).all()
            ]
        return [KeyedJob(int(r.id), r.correlation_key, r.type, r.state) for r in rows]

    async def job_keys_from(self, low: str, limit: int = CANDIDATE_SAMPLE) -> list[KeyedJob]:
        """The first ``limit`` open jobs whose key sorts at or after ``low`` (in the
        database's collation; a caller filters what it wants from them)."""
        async with self._read() as conn:
            rows = (await conn.execute(keys_from_query(low, limit))).all()
        return [KeyedJob(int(r.id), r.correlation_key, r.type, r.state) for r in rows]

    async def response_by_key(self, correlation_key: str, limit: int = 50) -> list[Response]:
        """The newest responses that carry ``correlation_key``."""
        async with self._read() as conn:
            rows = (await conn.execute(key_responses_query(correlation_key, limit))).all()
        return [Response(**r._asdict()) for r in rows]
