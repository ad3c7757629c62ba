"""The job state machine, written down once as data.

    scheduled -> running -> awaiting -> completed | failed | cancelled

Every state change anywhere in hipq is checked against ``TRANSITIONS``; the store
turns each into a guarded update (``WHERE state = :expected``) so that a lost race
changes nothing instead of corrupting a job.
"""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    SCHEDULED = "scheduled"  # waiting for run_at, a window or its throttlers
    RUNNING = "running"  # admitted and claimed; persisted before the request leaves
    AWAITING = "awaiting"  # the request was sent; waiting for the correlated response
    COMPLETED = "completed"
    FAILED = "failed"  # retries exhausted or non-retryable: the dead-letter set
    CANCELLED = "cancelled"


OPEN = frozenset({State.SCHEDULED, State.RUNNING, State.AWAITING})
IN_FLIGHT = frozenset({State.RUNNING, State.AWAITING})  # these hold capacity
TERMINAL = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED})

TRANSITIONS: dict[State, frozenset[State]] = {
    # scheduled -> scheduled: deferred to a window, or edited by an operator.
    # scheduled -> completed/failed: an operator completed or failed it before it ran.
    State.SCHEDULED: frozenset(
        {State.SCHEDULED, State.RUNNING, State.COMPLETED, State.FAILED, State.CANCELLED}
    ),
    # running -> scheduled: a failed attempt that the retry strategy retries.
    # running -> completed/failed directly: transports whose call returns the result.
    State.RUNNING: frozenset(
        {State.AWAITING, State.SCHEDULED, State.COMPLETED, State.FAILED, State.CANCELLED}
    ),
    State.AWAITING: frozenset({State.SCHEDULED, State.COMPLETED, State.FAILED, State.CANCELLED}),
    # Terminal states change only by an explicit operator retry or reschedule (a new
    # attempt), and
    # failed/cancelled -> completed by a late successful response when the job type
    # opts in (`late_responses: accept`): the peer did the work after all.
    State.COMPLETED: frozenset({State.SCHEDULED}),
    State.FAILED: frozenset({State.SCHEDULED, State.COMPLETED}),
    State.CANCELLED: frozenset({State.SCHEDULED, State.COMPLETED}),
}


class InvalidTransition(ValueError):
    def __init__(self, source: State, target: State) -> None:
        super().__init__(f"a {source} job cannot become {target}")
        self.source, self.target = source, target


def can_transition(source: State | str, target: State | str) -> bool:
    # Members pass as they are: ``State(member)`` costs an enum lookup, twice per settled job.
    if type(source) is not State:
        source = State(source)
    if type(target) is not State:
        target = State(target)
    return target in TRANSITIONS[source]


def check_transition(source: State | str, target: State | str) -> None:
    if not can_transition(source, target):
        raise InvalidTransition(State(source), State(target))


def sources_of(target: State) -> frozenset[State]:
    """The states from which ``target`` may be reached (used to build guarded updates)."""
    return frozenset(s for s, targets in TRANSITIONS.items() if target in targets)
