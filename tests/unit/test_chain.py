"""The throttler chain, the running view and weighted concurrency."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipq.jobs import Job
from hipq.lifecycle import (
    State,
)
from hipq.plugins import THROTTLERS, build
from hipq.throttling import InFlight, RunningView, Stage, Start, Verdict
from tests.chains import run_chain
from tests.factories import NOW
from tests.factories import numbered_job as job
from throttlers.concurrency import ConcurrencySettings, WeightedConcurrency


def flight(job_id: int, weight: int = 1, **labels: str) -> InFlight:
    return InFlight(id=job_id, type="ok", weight=weight, labels=labels, claimed_at=NOW)


def candidates(*weights: int, critical: Sequence[int] = ()) -> list[Job]:
    return [
        job(10 + i, state=State.SCHEDULED, weight=w, critical=(10 + i) in critical, attempt=0)
        for i, w in enumerate(weights)
    ]


def test_running_view() -> None:
    view = RunningView(
        [flight(1, 2, region="east"), flight(2, 3, region="east"), flight(3, 1)],
        [Start(NOW - timedelta(seconds=30), {}), Start(NOW - timedelta(seconds=5), {})],
    )
    assert view.total_weight == 6
    assert view.weight_by("region") == {"east": 5, None: 1}
    assert view.count_by("region") == {"east": 2, None: 1}
    assert len(view.starts_since(NOW - timedelta(seconds=10))) == 1


class Fn:
    """A throttler from a function, for the chain tests."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.seen: list[list[int]] = []

    def decide(self, cands: Sequence[Job], view: RunningView, now: datetime) -> Any:
        self.seen.append([j.id for j in cands])
        return self.fn(cands)


def admit_all(cands: Sequence[Job]) -> Verdict:
    return Verdict(admitted=[j.id for j in cands])


def test_chain_filters_in_order_and_keeps_reasons() -> None:
    first = Fn(lambda cs: Verdict(admitted=[c.id for c in cs if c.id != 11], held={11: "no 11"}))
    second = Fn(lambda cs: Verdict(admitted=[c.id for c in cs if c.id != 12]))
    result = run_chain(
        [Stage("first", first), Stage("second", second)],
        candidates(1, 1, 1, 1),
        RunningView([]),
        NOW,
    )
    assert [j.id for j in result.admitted] == [10, 13]
    assert second.seen == [[10, 12, 13]]
    assert result.held == {11: "no 11", 12: "held by second"}
    assert result.held_by == {"first": 1, "second": 1}
    assert result.errors == []


def test_chain_deferrals_leave_the_chain() -> None:
    later = NOW + timedelta(hours=1)
    first = Fn(lambda cs: Verdict(admitted=[c.id for c in cs[1:]], deferred={cs[0].id: later}))
    second = Fn(admit_all)
    result = run_chain(
        [Stage("window", first), Stage("next", second)], candidates(1, 1), RunningView([]), NOW
    )
    assert result.deferred == {10: later}
    assert [j.id for j in result.admitted] == [11]
    assert second.seen == [[11]]
    assert result.held == {}


def _raise(cs: Sequence[Job]) -> Verdict:
    raise RuntimeError("plugin bug")


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (_raise, "RuntimeError: plugin bug"),
        (lambda cs: None, "returned NoneType, not a Verdict"),
        (lambda cs: [c.id for c in cs], "returned list, not a Verdict"),
        (lambda cs: Verdict(admitted=[c.id for c in cs] + [999]), "not given: [999]"),
        (lambda cs: Verdict(admitted=[cs[0].id], held={cs[0].id: "x"}), "twice"),
        (lambda cs: Verdict(deferred={cs[0].id: datetime(2026, 1, 6)}), "aware datetime"),
        (lambda cs: Verdict(held={cs[0].id: 42}), "reason"),
        (lambda cs: Verdict(admitted=["10"]), "not given"),
    ],
    ids=[
        "raises",
        "none",
        "list",
        "unknown-id",
        "twice",
        "naive-defer",
        "non-text-reason",
        "string-id",
    ],
)
def test_faulty_throttler_holds_its_candidates_not_the_queue(answer: Any, error: str) -> None:
    after = Fn(admit_all)
    stages = [Stage("bad", Fn(answer)), Stage("after", after)]
    result = run_chain(stages, candidates(1, 1, critical=[11]), RunningView([]), NOW)
    assert result.admitted == []
    assert result.held == {10: "throttler bad failed", 11: "throttler bad failed"}
    assert result.deferred == {}
    [(stage, message)] = result.errors
    assert stage == "bad" and error in message
    assert after.seen == []


def test_critical_jobs_bypass_stages_that_let_them_through() -> None:
    closed = Fn(lambda cs: Verdict())
    stages = [Stage("gate", closed, lets_critical_through=True)]
    result = run_chain(stages, candidates(1, 1, 1, critical=[11]), RunningView([]), NOW)
    assert [j.id for j in result.admitted] == [11]
    assert closed.seen == [[10, 12]]
    assert set(result.held) == {10, 12}
    strict = run_chain(
        [Stage("gate", closed)], candidates(1, 1, critical=[11]), RunningView([]), NOW
    )
    assert strict.admitted == []


def test_critical_jobs_pass_a_failing_stage_that_lets_them_through() -> None:
    stages = [Stage("bad", Fn(_raise), lets_critical_through=True)]
    result = run_chain(stages, candidates(1, 1, critical=[11]), RunningView([]), NOW)
    assert [j.id for j in result.admitted] == [11]
    assert result.held == {10: "throttler bad failed"}


def concurrency(limit: int) -> WeightedConcurrency:
    return WeightedConcurrency(ConcurrencySettings(limit=limit))


def test_weighted_concurrency_admits_in_order_while_it_fits() -> None:
    verdict = concurrency(5).decide(candidates(2, 2, 1, 1), RunningView([]), NOW)
    assert verdict.admitted == [10, 11, 12]
    assert verdict.held == {13: "concurrency 5/5 in use, needs 1"}


def test_weighted_concurrency_counts_in_flight_weight() -> None:
    view = RunningView([flight(1, 3), flight(2, 1)])
    verdict = concurrency(5).decide(candidates(1, 1), view, NOW)
    assert verdict.admitted == [10]
    assert verdict.held == {11: "concurrency 5/5 in use, needs 1"}


def test_weighted_concurrency_lets_no_light_job_overtake_a_heavy_one() -> None:
    view = RunningView([flight(1, 3)])
    verdict = concurrency(5).decide(candidates(3, 1, 1), view, NOW)
    assert verdict.admitted == []
    assert verdict.held == {
        10: "concurrency 3/5 in use, needs 3",
        11: "concurrency 3/5 in use (queue order)",
        12: "concurrency 3/5 in use (queue order)",
    }


def test_weighted_concurrency_never_blocks_on_a_job_heavier_than_the_capacity() -> None:
    verdict = concurrency(4).decide(candidates(1, 5, 2), RunningView([]), NOW)
    assert verdict.admitted == [10, 12]
    assert verdict.held == {11: "weight 5 exceeds the capacity of 4"}


@settings(max_examples=200)
@given(
    limit=st.integers(1, 10),
    running=st.lists(st.integers(1, 4), max_size=4),
    weights=st.lists(st.integers(1, 6), max_size=12),
)
def test_weighted_concurrency_never_exceeds_its_limit(
    limit: int, running: list[int], weights: list[int]
) -> None:
    view = RunningView([flight(100 + i, w) for i, w in enumerate(running)])
    cands = candidates(*weights)
    verdict = concurrency(limit).decide(cands, view, NOW)
    admitted = [j for j in cands if j.id in verdict.admitted]
    in_use = sum(running)
    if in_use <= limit:
        assert in_use + sum(j.weight for j in admitted) <= limit
    else:
        assert admitted == []
    assert set(verdict.admitted) | set(verdict.held) == {j.id for j in cands}
    # Queue order: everything admitted that fits comes before the first job held for room.
    held_for_room = [j.id for j in cands if j.id in verdict.held and j.weight <= limit]
    if held_for_room:
        assert all(a < held_for_room[0] for a in verdict.admitted)


def test_a_stage_reads_the_optional_members_once_with_their_defaults() -> None:
    plain = Stage.of("plain", Fn(admit_all))
    assert (plain.runs_inline, plain.admits_in_order, plain.lookback_seconds) == (False, False, 0)
    assert (plain.label, plain.scan_groups, plain.scan_room) == (None, None, None)
    assert plain.defer_reason == "deferred by plain"
    window = Stage.of("window", build(THROTTLERS, "window", {}))
    assert window.runs_inline and window.admits_in_order
    assert window.defer_reason == "outside its time windows"
    limit = {"limit": 1, "per": "1m", "label": "region"}
    rate = Stage.of("rate", build(THROTTLERS, "rate", limit), lets_critical_through=True)
    assert (rate.lookback_seconds, rate.label, rate.lets_critical_through) == (60, "region", True)
