"""The statements of a queue's tick, each written once in SQLAlchemy Core.

Both dialects run these: SQLite through SQLAlchemy, PostgreSQL as the same statement
compiled once for asyncpg (``hipq.store.tick_sql``). What a dialect adds is only
where the two engines differ: row locks (``FOR UPDATE SKIP LOCKED``, which SQLite's
compiler leaves out), how a set of ids is bound, and the lease fence travelling with
the due scan as a data-modifying WITH on PostgreSQL.

Bound names: ``b_queue``, ``b_owner``, ``b_token``, ``b_expires`` (the fence),
``b_after`` (the next-due read), ``b_now``, ``b_limit``, ``b_max_weight`` (the due
scan), ``b_now``, ``b_deadline``, ``b_ids`` (the claim).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    Table,
    Text,
    bindparam,
    cast,
    func,
    literal_column,
    not_,
    null,
    select,
    true,
    update,
)
from sqlalchemy.dialects import sqlite

from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.queue_order import order_key
from hipq.store.schema import attempts, jobs, queues
from hipq.store.state_guards import CLAIM as CLAIM_GUARD
from hipq.store.state_guards import SCHEDULED_SQL, SETTLE, const

# The lease fence: renews the lease of the owner holding this token and reads the
# queue's flags with it; no row when another process took the lease.
FENCE = (
    update(queues)
    .where(
        queues.c.name == bindparam("b_queue"),
        queues.c.lease_owner == bindparam("b_owner"),
        queues.c.lease_token == bindparam("b_token"),
    )
    .values(lease_expires_at=bindparam("b_expires", type_=queues.c.lease_expires_at.type))
    .returning(queues.c.paused, queues.c.forbidden_flags)
)

# When the queue's next scheduled job falls due after ``b_after``.
NEXT_RUN_AT = select(func.min(jobs.c.run_at).label("next_run_at")).where(
    jobs.c.queue == bindparam("b_queue"),
    jobs.c.state == SCHEDULED_SQL,
    jobs.c.run_at > bindparam("b_after", type_=jobs.c.run_at.type),
)


def due_query(order: str, aging: float | None, weighed: bool, epoch: Any) -> Select[Any]:
    """Due jobs of ``b_queue`` at ``b_now`` in queue order, at most ``b_limit`` (and none
    heavier than ``b_max_weight`` if ``weighed``); ``epoch`` is the dialect's seconds
    since 1970 of ``run_at`` (for aging's order)."""
    keys = order_key(
        order, aging, run_at=jobs.c.run_at, priority=jobs.c.priority, id=jobs.c.id, epoch=epoch
    )
    query = (
        select(jobs)
        .where(
            jobs.c.queue == bindparam("b_queue"),
            jobs.c.state == SCHEDULED_SQL,
            jobs.c.run_at <= bindparam("b_now", type_=jobs.c.run_at.type),
        )
        .order_by(*keys)
        .limit(bindparam("b_limit"))
    )
    if weighed:
        query = query.where(jobs.c.weight <= bindparam("b_max_weight"))
    return query


def due_scan(due: Select[Any], fenced: bool = False) -> Select[Any]:
    """The due scan: one row with the next run_at after ``b_after`` and a due job's
    columns from ``due`` (NULLs when none is due: the first row is always there), its
    rows locked, skipping those another transaction holds.

    ``fenced``: the lease fence goes with it (a data-modifying WITH, PostgreSQL only):
    the queue's paused and forbidden flags come first, a paused queue reads no job,
    and a fence that matched none returns no row."""
    locked = due.with_for_update(skip_locked=True)
    if not fenced:
        after = NEXT_RUN_AT.subquery("n")
        found = locked.subquery("d")
        return select(after.c.next_run_at, found).select_from(after.outerjoin(found, true()))
    fence = FENCE.cte("fence")
    next_run_at = NEXT_RUN_AT.lateral("n")
    gated = locked.where(not_(fence.c.paused)).lateral("d")
    columns = (fence.c.paused, fence.c.forbidden_flags, next_run_at.c.next_run_at, gated)
    return select(*columns).select_from(fence.join(next_run_at, true()).outerjoin(gated, true()))


# -- new rows -------------------------------------------------------------------------


def insert_sql(
    table: Table, columns: Sequence[str], paramstyle: str, *, returning_id: bool = False
) -> tuple[str, tuple[str, ...]]:
    """SQLite's INSERT of ``columns`` into ``table``: ``table.insert()`` compiled as text
    for a connection that SQLAlchemy does not drive (the SQLite insert on the aiosqlite
    connection, an application's own connection in ``hipq.transactional``), in the
    driver's ``paramstyle`` ("qmark" or "named"); and the order of its parameters."""
    stmt = table.insert().values({c: bindparam(c) for c in columns})
    if returning_id:
        stmt = stmt.returning(table.c.id)
    compiled: Any = stmt.compile(dialect=sqlite.dialect(paramstyle=paramstyle))
    return str(compiled), tuple(compiled.positiontup or compiled.bind_names.values())


# -- the claim: scheduled -> running ------------------------------------------------------


# What a claim writes, as data: the SQL statement and the ``Job`` in memory are both
# made from it. ``NOW`` and ``DEADLINE`` stand for the claim's instants.
NOW, DEADLINE = "now", "deadline"
CLAIM_SETS: dict[str, Any] = {
    "state": State.RUNNING,
    "claimed_at": NOW,
    "deadline": DEADLINE,
    "waiting_reason": None,
    "updated_at": NOW,
    # A new attempt is the owner's to send until it hands it over (``hipq.batch_loop.hand_off``):
    # an executor of an earlier attempt must not take this one.
    "executor": None,
}
CLAIM_INCREMENTS = ("attempt",)  # each + 1


def claim(ids: ColumnElement[bool], deadline: Any = None) -> Any:
    """The claim of the jobs ``ids`` selects (the dialect binds ``b_ids``); its deadline
    ``b_deadline``, or the expression ``deadline`` (each job's own timeout)."""
    bound = {
        NOW: bindparam("b_now", type_=jobs.c.claimed_at.type),
        DEADLINE: (
            bindparam("b_deadline", type_=jobs.c.deadline.type) if deadline is None else deadline
        ),
    }
    values: dict[str, Any] = {}
    for name, value in CLAIM_SETS.items():
        if isinstance(value, State):
            values[name] = const(value.value)
        elif value is None:
            values[name] = null()
        else:
            values[name] = bound[value]
    values.update({name: jobs.c[name] + 1 for name in CLAIM_INCREMENTS})
    return update(jobs).where(ids, CLAIM_GUARD.sql(jobs.c.state)).values(values)


def _none(column: Any) -> ColumnElement[bool]:
    """No value in a JSON column: SQL NULL, JSON null or an empty list (both engines
    store JSON as text that reads back so)."""
    empty: tuple[Any, ...] = (literal_column("'null'"), literal_column("'[]'"))
    return column.is_(None) | cast(column, Text).in_(empty)  # type: ignore[no-any-return]


# The due jobs that a queue whose chain is only the time windows stage (no throttlers,
# no capacity: ``Admission.claims_at_scan``) admits whatever else is due or running:
# without windows (``throttlers.windows`` admits those) and without flags (which an
# operator may forbid on the queue: ``hipq.forbidden_flags``). Others go through the
# chain in a tick of the loop.
ADMITTED_UNSEEN = _none(jobs.c.windows) & _none(jobs.c.flags)


def claim_at_scan(due: Select[Any]) -> Select[Any]:
    """The fence, the due scan and the claim in one statement (PostgreSQL: a
    data-modifying WITH, which commits on its own when sent outside a transaction).

    The lease fence renews the lease and reads the queue's paused and forbidden flags;
    the due jobs of ``due`` are locked (skipping those another transaction holds), and
    of them those in ``ADMITTED_UNSEEN`` are claimed, each with its own timeout. The one
    row per claimed job (or one with NULL job columns when none was) carries paused,
    forbidden flags, the next run_at after ``b_after``, how many due jobs the scan read,
    then the claimed job's columns (table order). No row: the fence matched none, and
    nothing was written."""
    fence = FENCE.cte("fence")
    running = select(true()).select_from(fence).where(not_(fence.c.paused)).exists()
    picked = (
        due.with_only_columns(jobs.c.id, ADMITTED_UNSEEN.label("unseen"))
        .where(running)
        .with_for_update(skip_locked=True, of=jobs)
        .cte("picked")
    )
    now = bindparam("b_now", type_=jobs.c.claimed_at.type)
    deadline = now + literal_column("interval '1 second'") * jobs.c.timeout_seconds
    claimed = (
        claim((jobs.c.id == picked.c.id) & picked.c.unseen, deadline)
        .returning(*jobs.c)
        .cte("claimed")
    )
    read = select(func.count()).select_from(picked).scalar_subquery()
    next_run_at = NEXT_RUN_AT.lateral("n")
    columns = (fence.c.paused, fence.c.forbidden_flags, next_run_at.c.next_run_at, read, claimed)
    joined = fence.join(next_run_at, true()).outerjoin(claimed, true())
    return select(*columns).select_from(joined)


_FIELD_AT = {name: i for i, name in enumerate(Job._fields)}


def claimed_by(now: datetime, deadline: datetime) -> Callable[[Job], Job]:
    """The ``Job`` in memory as a claim at ``now`` with ``deadline`` leaves it (by
    position: ``_replace`` costs several times more, once per job claimed)."""
    instants = {NOW: now, DEADLINE: deadline}
    sets = [
        (_FIELD_AT[name], value if value is None or isinstance(value, State) else instants[value])
        for name, value in CLAIM_SETS.items()
        if name in _FIELD_AT  # columns ``Job`` does not carry (``rows.NOT_ON_JOB``)
    ]
    increments = [_FIELD_AT[name] for name in CLAIM_INCREMENTS]

    def claimed(job: Job) -> Job:
        values = list(job)
        for at, value in sets:
            values[at] = value
        for at in increments:
            values[at] += 1
        return Job._make(values)

    return claimed


# -- the settle: one attempt's outcome ------------------------------------------------------

# The job columns a settlement writes, each from the ``Settlement`` field of its name.
SETTLE_COLUMNS = ("state", "run_at", "payload", "finished_at", "result", "last_error")
# What every settlement writes besides (``updated_at`` is the tick's now).
SETTLE_RESETS: dict[str, Any] = {"deadline": None, "cancel_requested": False}
# The guard of a settlement: the job is in flight in the attempt it settles.
SETTLE_KEYS = ("id", "attempt")
SETTLE_GUARD = SETTLE

# The columns of an attempt record, each from the ``Attempt`` field of its name.
ATTEMPT_COLUMNS = tuple(c for c in attempts.c.keys() if c != "id")

assert set(SETTLE_COLUMNS) | set(SETTLE_RESETS) <= set(jobs.c.keys())
