"""The fair share of the queues over the live processes (pure)."""

from __future__ import annotations

from collections import Counter

from hipq.process.queue_share import assign, share_of

QUEUES = [f"q{i}" for i in range(9)]


def test_nine_queues_over_three_processes_three_each() -> None:
    serves = {p: QUEUES for p in ("a", "b", "c")}
    out = assign(serves, {})
    assert sorted(out) == QUEUES
    assert Counter(out.values()) == {"a": 3, "b": 3, "c": 3}


def test_a_joining_process_takes_its_share_and_the_others_keep_theirs() -> None:
    alone = assign({"a": QUEUES}, {})
    assert set(alone.values()) == {"a"}
    joined = assign({"a": QUEUES, "b": QUEUES}, alone)
    counts = Counter(joined.values())
    assert counts == {"a": 5, "b": 4}
    # Only what b takes moves: a keeps five of the queues it ran.
    assert len(share_of("a", joined) & share_of("a", alone)) == 5


def test_a_leaving_process_s_queues_are_spread_and_nothing_else_moves() -> None:
    three = assign({p: QUEUES for p in "abc"}, {})
    two = assign({"a": QUEUES, "b": QUEUES}, three)
    assert Counter(two.values()) in ({"a": 5, "b": 4}, {"a": 4, "b": 5})
    for queue, owner in three.items():
        if owner != "c":
            assert two[queue] == owner


def test_every_process_computes_the_same_assignment() -> None:
    serves = {p: QUEUES for p in ("x", "y", "z")}
    owners = {"q1": "x", "q2": "x", "q3": "x", "q4": "x", "q5": "y"}
    assert assign(dict(reversed(serves.items())), owners) == assign(serves, owners)


def test_a_process_limited_to_some_queues_gets_only_those() -> None:
    serves = {"a": QUEUES, "b": ["q0", "q1"]}
    out = assign(serves, {"q0": "a", "q1": "a"})
    assert share_of("b", out) <= {"q0", "q1"}
    assert share_of("b", out)  # it gets one of them: a holds more than its share
    assert set(out) == set(QUEUES)


def test_an_owner_that_may_no_longer_serve_a_queue_loses_it() -> None:
    out = assign({"a": ["q1"], "b": ["q0", "q1"]}, {"q0": "a"})
    assert out["q0"] == "b"


def test_no_process_no_assignment() -> None:
    assert assign({}, {"q0": "gone"}) == {}
