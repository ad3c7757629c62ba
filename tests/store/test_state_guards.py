"""Every guarded update of the store, checked against the transition table."""

from __future__ import annotations

from hipq.lifecycle import TRANSITIONS, State, can_transition
from hipq.store import state_guards as guards

S, R, A = State.SCHEDULED, State.RUNNING, State.AWAITING
C, F, X = State.COMPLETED, State.FAILED, State.CANCELLED

# (method, from-states, to-state); None: the state stays, other fields change.
EXPECTED = {
    ("job_claim", frozenset({S}), R),
    ("job_mark_awaiting", frozenset({R}), A),
    ("job_defer", frozenset({S}), S),
    ("job_update_pending", frozenset({S}), S),
    ("job_insert_many(job_key)", frozenset({S}), S),
    ("job_cancel", frozenset({S}), X),
    ("job_retry", frozenset({F, X}), S),
    ("job_complete", frozenset({S}), C),
    ("job_fail", frozenset({S}), F),
    ("job_reschedule", frozenset({S, F, X}), S),
    ("job_request", frozenset({R, A}), None),
    ("response_accept_late", frozenset({F, X}), C),
    ("job_settle", frozenset({R, A}), None),
    ("job_note_waiting", frozenset({S}), None),
    ("job_note_oversized", frozenset({S}), None),
    ("job_extend_deadlines", frozenset({R, A}), None),
    ("job_set_payloads", frozenset({R, A}), None),
}


def test_the_guards_are_the_listed_ones() -> None:
    assert {(g.method, g.sources, g.target) for g in guards.GUARDS} == EXPECTED


def test_every_guarded_transition_is_allowed_by_the_table() -> None:
    for method, sources, target in EXPECTED:
        assert sources, method
        for source in sources:
            if target is not None:
                assert can_transition(source, target), (method, source, target)


def test_a_settlement_may_reach_every_outcome_from_its_states() -> None:
    # job_settle writes whichever state the outcome decided: each must be allowed.
    for source in guards.SETTLE.sources:
        assert {S, C, F, X} <= TRANSITIONS[source]


def test_updates_that_keep_the_state_touch_only_open_jobs() -> None:
    for method, sources, target in EXPECTED:
        if target is None:
            assert sources <= {S, R, A}, method
