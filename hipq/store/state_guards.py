"""The state guards of the store's updates, built from the transition table.

Every update that changes a job's state (or a field only a job in some states
may change) says ``WHERE state IN (<from-states>)``: a lost race then updates no
row instead of corrupting a job. The from-states come from ``hipq.lifecycle``'s
table, narrowed where an operation is stricter than the table allows (a cancel
ends only a scheduled job at once; one in flight is asked to stop).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, literal_column

from hipq.lifecycle import IN_FLIGHT, OPEN, TERMINAL, State, sources_of


def const(value: str) -> Any:
    """A state written into the SQL text rather than bound as a parameter.

    PostgreSQL uses a partial index (state = 'scheduled', status = 'pending', open
    correlation and job keys) only where it can prove the index's predicate from
    constants in the query. asyncpg prepares every statement, and after a few runs
    the server may keep a generic plan built without the values: matching the
    responses inbox then scanned every in-flight job for each pending response.
    """
    return literal_column(f"'{value}'")


@dataclass(frozen=True, slots=True)
class Guard:
    """One guarded update: the states a row must be in, and the state it gets
    (None: the state stays, only other fields change)."""

    method: str
    sources: frozenset[State]
    target: State | None

    def sql(self, column: Any) -> ColumnElement[bool]:
        """``column`` in the from-states, as constants (see ``const``)."""
        values = sorted(s.value for s in self.sources)
        if len(values) == 1:
            return column == const(values[0])  # type: ignore[no-any-return]
        return column.in_([const(v) for v in values])  # type: ignore[no-any-return]


def _to(method: str, target: State, within: frozenset[State] = frozenset(State)) -> Guard:
    return Guard(method, sources_of(target) & within, target)


def _settled(method: str) -> Guard:
    # An attempt's outcome may finish or reschedule the job: the states from which
    # every one of those targets is allowed.
    targets = (State.SCHEDULED, State.COMPLETED, State.FAILED, State.CANCELLED)
    # Only jobs in flight settle: an operator may end a scheduled job too, but not here.
    sources = frozenset.intersection(*(sources_of(t) for t in targets)) & IN_FLIGHT
    return Guard(method, sources, None)


def _stays(method: str, states: frozenset[State]) -> Guard:
    return Guard(method, states, None)


SCHEDULED_ONLY = frozenset({State.SCHEDULED})

CLAIM = _to("job_claim", State.RUNNING)
MARK_AWAITING = _to("job_mark_awaiting", State.AWAITING)
DEFER = _to("job_defer", State.SCHEDULED, SCHEDULED_ONLY)
UPDATE_PENDING = _to("job_update_pending", State.SCHEDULED, SCHEDULED_ONLY)
KEYED_REPLACE = _to("job_insert_many(job_key)", State.SCHEDULED, SCHEDULED_ONLY)
CANCEL = _to("job_cancel", State.CANCELLED, SCHEDULED_ONLY)
RETRY = _to("job_retry", State.SCHEDULED, TERMINAL - {State.COMPLETED})
COMPLETE = _to("job_complete", State.COMPLETED, SCHEDULED_ONLY)
FAIL = _to("job_fail", State.FAILED, SCHEDULED_ONLY)
RESCHEDULE = _to("job_reschedule", State.SCHEDULED, OPEN - IN_FLIGHT | TERMINAL - {State.COMPLETED})
# An operator's request of a job in flight, for its loop (hipq.operator_requests).
REQUEST = _stays("job_request", IN_FLIGHT)
ACCEPT_LATE = _to("response_accept_late", State.COMPLETED, TERMINAL)
SETTLE = _settled("job_settle")
NOTE_WAITING = _stays("job_note_waiting", SCHEDULED_ONLY)
NOTE_OVERSIZED = _stays("job_note_oversized", SCHEDULED_ONLY)
EXTEND_DEADLINES = _stays("job_extend_deadlines", IN_FLIGHT)
SET_PAYLOADS = _stays("job_set_payloads", IN_FLIGHT)

GUARDS = (
    CLAIM,
    MARK_AWAITING,
    DEFER,
    UPDATE_PENDING,
    KEYED_REPLACE,
    CANCEL,
    RETRY,
    COMPLETE,
    FAIL,
    RESCHEDULE,
    REQUEST,
    ACCEPT_LATE,
    SETTLE,
    NOTE_WAITING,
    NOTE_OVERSIZED,
    EXTEND_DEADLINES,
    SET_PAYLOADS,
)

# State sets of the store's reads, as constants for the same partial indexes.
SCHEDULED_SQL = const(State.SCHEDULED.value)
RUNNING_SQL = const(State.RUNNING.value)
IN_FLIGHT_VALUES = sorted(s.value for s in IN_FLIGHT)
OPEN_VALUES = sorted(s.value for s in OPEN)
IN_FLIGHT_SQL = [const(v) for v in IN_FLIGHT_VALUES]
OPEN_SQL = [const(v) for v in OPEN_VALUES]
# The open states as SQL text, in the lifecycle's order: the open-key indexes'
# predicate (``hipq.store.schema``), which a query must repeat for the index to serve it.
OPEN_STATES_SQL = "state IN (" + ", ".join(f"'{s.value}'" for s in State if s in OPEN) + ")"
PENDING_SQL = const("pending")
