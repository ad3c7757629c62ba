"""The owner's side of the hand-off, pure: who sends each claimed job, which jobs an
executor that died leaves to the owner, executors' reports read as the loop's own,
and an outcome's round trip through JSON."""

from __future__ import annotations

from datetime import timedelta

import orjson

from hipq.batch_loop import outcome_wire
from hipq.batch_loop.hand_off import HandOff
from hipq.batch_loop.reports import Reports
from hipq.lifecycle import State
from hipq.outcomes import Cancelled, Failed, Snoozed, Succeeded
from hipq.retry import AttemptError
from hipq.store.hand_off import Report
from tests.factories import NOW, numbered_job


def test_alone_the_owner_hands_nothing_over() -> None:
    hand = HandOff("a")
    hand.serve_with(["a"], ["a", "b"])  # b is live but does not serve this queue
    assert hand.choose([numbered_job(i) for i in range(1, 10)], {}) == {}


def test_claimed_jobs_go_to_the_least_loaded_in_turn_the_owner_included() -> None:
    hand = HandOff("a")
    hand.serve_with(["a", "b", "c"], ["a", "b", "c"])
    running = {1: numbered_job(1), 2: numbered_job(2)}  # both sent by the owner
    hand.handed = {}
    chosen = hand.choose([numbered_job(i) for i in range(10, 17)], running)
    counts = {who: list(chosen.values()).count(who) for who in ("b", "c")}
    # a holds 2 already: b and c get 3 each, a 1 more (9 running, 3 each).
    assert counts == {"b": 3, "c": 3} and len(chosen) == 6


def test_the_owner_keeps_its_sends_until_it_has_keep_below_running() -> None:
    hand = HandOff("a", keep_below=4)
    hand.serve_with(["a", "b"], ["a", "b"])
    running = {1: numbered_job(1), 2: numbered_job(2)}  # the owner sends 2 already
    # 2 more stay with the owner (4 running), the next go to the least loaded in turn:
    # b until it has 4 too, then a and b alternate.
    chosen = hand.choose([numbered_job(i) for i in range(10, 20)], running)
    assert chosen == {12: "b", 13: "b", 14: "b", 15: "b", 17: "b", 19: "b"}


def test_the_owner_keeps_as_many_claims_as_choose_leaves_to_it() -> None:
    hand = HandOff("a", keep_below=4)
    assert hand.keeps({}, 1000) == 1000  # alone: all of them
    hand.serve_with(["a", "b"], ["a", "b"])
    running = {1: numbered_job(1), 2: numbered_job(2), 3: numbered_job(3)}
    hand.handed = {3: "b"}
    kept = hand.keeps(running, 1000)
    assert kept == 2
    assert hand.choose([numbered_job(i) for i in range(10, 10 + kept)], running) == {}
    assert hand.choose([numbered_job(i) for i in range(10, 11 + kept)], running) != {}
    running[4] = numbered_job(4)
    running[5] = numbered_job(5)
    assert hand.keeps(running, 1000) == 0


def test_jobs_of_an_executor_gone_are_the_owner_s_to_send_once_read() -> None:
    hand = HandOff("a")
    hand.serve_with(["a", "b"], ["a", "b"])
    hand.handed = {1: "b", 2: "b"}
    in_flight = {1: numbered_job(1), 2: numbered_job(2, state=State.AWAITING)}
    assert hand.serve_with(["a"], ["a"]) is True  # b left
    assert hand.unread  # its last reports are read before its jobs are sent again
    assert hand.orphans(in_flight, frozenset({"a", "b"})) == []  # b was live then
    orphans = hand.orphans(in_flight, frozenset({"a"}))
    assert [j.id for j in orphans] == [1]  # the awaiting one was sent
    assert hand.handed == {2: "b"}


def test_reports_become_the_loop_s_reports_for_the_current_attempt_only() -> None:
    hand = HandOff("a")
    in_flight = {i: numbered_job(i) for i in (1, 2, 3, 4)}
    failed = Failed(AttemptError("boom", kind="http_status"), response={"status": 500})
    rows = [
        Report("q", 1, 1, "sent"),
        Report("q", 2, 1, "outcome", body=outcome_wire.encode(failed)),
        Report("q", 3, 1, "heartbeat", deadline=NOW + timedelta(seconds=60)),
        Report("q", 4, 1, "checkpoint", body={"step": 3}),
        Report("q", 1, 0, "outcome", body=outcome_wire.encode(Succeeded())),  # stale
        Report("q", 9, 1, "sent"),  # not in flight here
    ]
    into = Reports()
    hand.take(rows, into, in_flight, [], lambda: NOW)
    assert into.sent == {(1, 1)}
    assert into.outcomes == {(2, 1): failed}
    assert into.deadlines == {3: NOW + timedelta(seconds=60)}
    assert into.payloads == {4: {"step": 3}}


def test_outcomes_survive_json() -> None:
    outcomes = [
        Succeeded({"$type": "a user's value", "at": "kept as is"}),
        Failed(AttemptError("x", "http_status", False, NOW), {"status": 503}, "Traceback..."),
        Snoozed(NOW, "429"),
        Cancelled(),
    ]
    for outcome in outcomes:
        stored = orjson.loads(orjson.dumps(outcome_wire.encode(outcome)))
        assert outcome_wire.decode(stored) == outcome
