"""Job rows to ``Job`` records and back."""

from __future__ import annotations

import operator
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import IntegrityError

from hipq.jobs import Job, NewJob
from hipq.lifecycle import State
from hipq.store.records import Conflict
from hipq.store.schema import jobs

# Every column list of a job row is derived from ``schema.jobs`` and the records: a
# column added there and to ``Job`` (and ``NewJob``, if a new job sets it) is read and
# written on both engines without another list to extend.

# The columns a new job's row takes from its ``NewJob``, in table order.
NEW_JOB_COLUMNS = tuple(c for c in jobs.c.keys() if c in {f.name for f in fields(NewJob)})


# Columns of the jobs table that ``Job`` does not carry, read by their own queries
# (``hipq.store.requests``; ``tenant``: the owner every keyed lookup is scoped to).
NOT_ON_JOB = ("operator_request", "executor", "has_dependents", "tenant")

_STATES = {s.value: s for s in State}
_ORDER = [jobs.c.keys().index(name) for name in Job._fields]
_STATE_AT = Job._fields.index("state")
# Per offset of the job's columns in a row: one itemgetter over them in Job's order.
_PICK: dict[int, operator.itemgetter[Any]] = {}


def row_to_job(row: Any, offset: int = 0) -> Job:
    """The ``Job`` of a row whose job columns (``select(jobs)``, table order) start at
    ``offset``: an asyncpg record or a SQLAlchemy row."""
    # Hot path: the due scan converts up to batch_size rows per tick: pick the columns
    # in Job's field order.
    pick = _PICK.get(offset)
    if pick is None:
        pick = _PICK[offset] = operator.itemgetter(*(offset + i for i in _ORDER))
    values = list(pick(row))
    values[_STATE_AT] = _STATES[values[_STATE_AT]]
    return Job._make(values)


def new_row(job: NewJob, now: datetime) -> dict[str, Any]:
    row = {name: getattr(job, name) for name in NEW_JOB_COLUMNS}
    # What every new job starts with (keyword arguments: the cheapest update, per job).
    row.update(
        state=State.SCHEDULED.value,
        attempt=0,
        created_at=now,
        updated_at=now,
        cancel_requested=False,
    )
    return row


# What ``new_row`` sets besides the ``NewJob``'s columns, and the columns an insert of
# new jobs writes, in table order.
_START_COLUMNS = tuple(
    c
    for c in new_row(NewJob("", "", {}, datetime.now(UTC)), datetime.now(UTC))
    if c not in NEW_JOB_COLUMNS
)
JOB_INSERT_COLUMNS = tuple(c for c in jobs.c.keys() if c in NEW_JOB_COLUMNS or c in _START_COLUMNS)
# Columns whose value is the same in every row of one insert (the insert's instant and
# what every new row starts with; ``new_row``, ``hipq.store.inbox``): PostgreSQL's
# unnest insert sends each once instead of as an array.
SHARED_PER_INSERT = {
    "hipq_jobs": _START_COLUMNS,
    "hipq_responses": (
        "received_at",
        "expires_at",
        "status",
        "job_id",
        "forced_job_id",
        "settled_at",
    ),
}

# A batch POST builds a Job per inserted row: by one itemgetter over Job's fields, a
# third of the cost of Job(**row).
_JOB_FIELDS = operator.itemgetter(*Job._fields)
_JOB_DEFAULTS = dict(Job._field_defaults)


def job_from_new(job_id: int, row: dict[str, Any]) -> Job:
    return Job._make(_JOB_FIELDS({**_JOB_DEFAULTS, **row, "id": job_id, "state": State.SCHEDULED}))


def conflict_from(exc: IntegrityError) -> Conflict:
    text = str(exc.orig)
    for name in ("correlation_key", "job_key"):
        if name in text:
            return Conflict(f"{name} is already used by an open job", field=name)
    return Conflict(f"conflicting write: {text.splitlines()[0]}")
