"""Job rows to ``Job`` records and back."""

from __future__ import annotations

import operator
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError

from hipq.jobs import Job, NewJob
from hipq.lifecycle import State
from hipq.store.records import Conflict
from hipq.store.schema import jobs

NEW_JOB_COLUMNS = (
    "type queue payload run_at priority weight labels windows timeout_seconds retry critical "
    "correlation_key job_key flags trace_context notify"
).split()

_STATES = {s.value: s for s in State}
_ORDER = [jobs.c.keys().index(name) for name in Job._fields]
_STATE_AT = Job._fields.index("state")


def row_to_job(row: Any) -> Job:
    # Hot path: the due scan converts up to batch_size rows per tick. Rows of
    # select(jobs) come in table column order; pick them in Job's field order.
    values = [row[i] for i in _ORDER]
    values[_STATE_AT] = _STATES[values[_STATE_AT]]
    return Job._make(values)


def new_row(job: NewJob, now: datetime) -> dict[str, Any]:
    row = {name: getattr(job, name) for name in NEW_JOB_COLUMNS}
    row.update(
        state=State.SCHEDULED.value,
        attempt=0,
        created_at=now,
        updated_at=now,
        cancel_requested=False,
    )
    return row


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
