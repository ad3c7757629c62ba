"""The job lifecycle: states and transitions as data."""

from __future__ import annotations

import pytest

from hipq.lifecycle import (
    IN_FLIGHT,
    OPEN,
    TERMINAL,
    TRANSITIONS,
    InvalidTransition,
    State,
    can_transition,
    check_transition,
    sources_of,
)


def test_states_partition_into_open_and_terminal() -> None:
    assert OPEN | TERMINAL == set(State)
    assert not OPEN & TERMINAL
    assert IN_FLIGHT == {State.RUNNING, State.AWAITING} < OPEN
    assert set(TRANSITIONS) == set(State)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("scheduled", "running"),
        ("scheduled", "cancelled"),
        ("scheduled", "scheduled"),
        ("running", "awaiting"),
        ("running", "completed"),
        ("running", "failed"),
        ("running", "scheduled"),
        ("running", "cancelled"),
        ("awaiting", "completed"),
        ("awaiting", "failed"),
        ("awaiting", "scheduled"),
        ("awaiting", "cancelled"),
        ("failed", "scheduled"),
        ("cancelled", "scheduled"),
        ("completed", "scheduled"),
    ],
)
def test_allowed_transitions(source: str, target: str) -> None:
    assert can_transition(source, target)
    check_transition(State(source), State(target))


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("scheduled", "awaiting"),
        ("awaiting", "running"),
        ("completed", "failed"),
        ("failed", "running"),
        ("cancelled", "running"),
        ("completed", "completed"),
        ("failed", "cancelled"),
    ],
)
def test_refused_transitions(source: str, target: str) -> None:
    assert not can_transition(source, target)
    with pytest.raises(InvalidTransition, match=f"a {source} job cannot become {target}"):
        check_transition(source, target)


def test_terminal_states_reopen_only_by_retry_or_a_late_success() -> None:
    assert TRANSITIONS[State.COMPLETED] == {State.SCHEDULED}
    for state in TERMINAL - {State.COMPLETED}:
        assert TRANSITIONS[state] == {State.SCHEDULED, State.COMPLETED}


def test_sources_of() -> None:
    assert sources_of(State.AWAITING) == {State.RUNNING}
    assert sources_of(State.RUNNING) == {State.SCHEDULED}
    # scheduled -> completed: an operator completed it before it ran.
    assert sources_of(State.COMPLETED) == IN_FLIGHT | {
        State.SCHEDULED,
        State.FAILED,
        State.CANCELLED,
    }


def test_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError):
        check_transition("running", "exploded")
