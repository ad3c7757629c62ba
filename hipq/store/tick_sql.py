"""A queue loop's hot statements on PostgreSQL, sent on the asyncpg connection itself.

Every tick runs the lease fence, the due scan, the claim and the next-due read.
Through SQLAlchemy Core each cost far more Python than the server's work on it
(building the expression, finding its compiled form, the cursor adapter, row
processing); here each is SQL text made once, which asyncpg keeps prepared per
connection. JSON columns come back decoded (the codec SQLAlchemy set on the
connection), timestamps as aware UTC datetimes, as through SQLAlchemy.

The due scan also reads when the queue's next job falls due after now (claims do
not change that: what they claim was due), and on a wake-up for a new job, whose
tick writes nothing before its due scan, the lease fence travels with it: a
data-modifying WITH, one round trip for both. A fence that matches no row returns
no row, and the tick raises ``LeaseLost`` before it writes anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.engine import Dialect as SqlDialect

from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.queue_order import order_key
from hipq.store.schema import jobs
from hipq.store.state_guards import CLAIM as CLAIM_GUARD
from hipq.store.state_guards import SCHEDULED_SQL

FENCE = (
    "UPDATE hipq_queues SET lease_expires_at = $4"
    " WHERE name = $1 AND lease_owner = $2 AND lease_token = $3"
    " RETURNING paused, forbidden_flags"
)
NEXT_RUN_AT = (
    "SELECT min(run_at) FROM hipq_jobs WHERE queue = $1 AND state = 'scheduled' AND run_at > $2"
)
_CLAIM_FROM = ", ".join(f"'{s.value}'" for s in sorted(CLAIM_GUARD.sources))
CLAIM = (
    "UPDATE hipq_jobs SET state = 'running', attempt = attempt + 1, claimed_at = $1,"
    " deadline = $2, waiting_reason = NULL, updated_at = $1"
    f" WHERE id = ANY($3::bigint[]) AND state IN ({_CLAIM_FROM})"
)

_STATES = {s.value: s for s in State}
_ORDER = [jobs.c.keys().index(name) for name in Job._fields]
_STATE_AT = Job._fields.index("state")


def job_from_record(record: Any, offset: int) -> Job:
    """A ``Job`` from a record whose job columns start at ``offset`` (table order)."""
    values = [record[offset + i] for i in _ORDER]
    values[_STATE_AT] = _STATES[values[_STATE_AT]]
    return Job._make(values)


@dataclass(frozen=True, slots=True)
class DueScan:
    """The due scan of one queue order, as SQL text for asyncpg.

    ``sql``'s rows: the next run_at after now, then a due job's columns (NULLs when
    none is due: the first row is always there). ``fenced_sql``'s: paused and the
    forbidden flags first, and no row at all when the fence matched none.
    """

    sql: str
    fenced_sql: str
    names: tuple[str, ...]
    defaults: dict[str, Any]

    def args(self, values: dict[str, Any]) -> list[Any]:
        return [values[n] if n in values else self.defaults[n] for n in self.names]


_scans: dict[tuple[str, float | None, bool], DueScan] = {}


def due_scan(dialect: SqlDialect, order: str, aging: float | None, weighed: bool) -> DueScan:
    key = (order, aging, weighed)
    scan = _scans.get(key)
    if scan is None:
        scan = _scans[key] = _build(dialect, order, aging, weighed)
    return scan


def due_query(order: str, aging: float | None, weighed: bool, epoch: Any) -> Any:
    """The due scan with bound ``b_queue``, ``b_now``, ``b_limit`` (and ``b_max_weight``),
    without row locks (the dialect adds them)."""
    keys = order_key(
        order, aging, run_at=jobs.c.run_at, priority=jobs.c.priority, id=jobs.c.id, epoch=epoch
    )
    query = (
        select(jobs)
        .where(
            jobs.c.queue == bindparam("b_queue"),
            jobs.c.state == SCHEDULED_SQL,
            jobs.c.run_at <= bindparam("b_now"),
        )
        .order_by(*keys)
        .limit(bindparam("b_limit"))
    )
    if weighed:
        query = query.where(jobs.c.weight <= bindparam("b_max_weight"))
    return query


def _build(dialect: SqlDialect, order: str, aging: float | None, weighed: bool) -> DueScan:
    plain = due_query(order, aging, weighed, func.extract("epoch", jobs.c.run_at))
    compiled = plain.with_for_update(skip_locked=True).compile(dialect=dialect)
    gated = plain.where(text("NOT f.paused")).with_for_update(skip_locked=True)
    compiled_gated = gated.compile(dialect=dialect)
    names = tuple(compiled.positiontup or ())
    assert names == tuple(compiled_gated.positiontup or ())
    n = len(names)
    queue, now = f"${names.index('b_queue') + 1}", f"${names.index('b_now') + 1}"
    next_run_at = (
        "SELECT min(run_at) AS next_run_at FROM hipq_jobs"
        f" WHERE queue = {queue} AND state = 'scheduled' AND run_at > {now}"
    )
    sql = (
        f"SELECT n.next_run_at, d.* FROM ({next_run_at}) AS n"
        f" LEFT JOIN LATERAL ({compiled.string}) AS d ON true"
    )
    fenced = (
        f"WITH fence AS (UPDATE hipq_queues SET lease_expires_at = ${n + 3}"
        f" WHERE name = {queue} AND lease_owner = ${n + 1} AND lease_token = ${n + 2}"
        " RETURNING paused, forbidden_flags)"
        " SELECT f.paused, f.forbidden_flags, n.next_run_at, d.* FROM fence AS f"
        f" CROSS JOIN LATERAL ({next_run_at}) AS n"
        f" LEFT JOIN LATERAL ({compiled_gated.string}) AS d ON true"
    )
    defaults = {k: b.value for k, b in compiled.binds.items() if not k.startswith("b_")}
    return DueScan(sql, fenced, names, defaults)
