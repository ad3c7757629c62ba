"""Pure core pieces: durations, the lifecycle, retry strategies, settle() and the chain."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipq.durations import format_duration, parse_duration
from hipq.jobs import Job
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
from hipq.outcomes import STRATEGY_FAULT_DELAY, Cancelled, Failed, Succeeded, settle
from hipq.plugins import PluginError, RetryStrategies
from hipq.retry import (
    AttemptError,
    Exponential,
    ExponentialSettings,
    Fixed,
    FixedSettings,
    GiveUp,
    NoneSettings,
    NoRetry,
    RetryAt,
)
from hipq.throttling import InFlight, RunningView, Stage, Start, Verdict, run_chain
from throttlers.concurrency import ConcurrencySettings, WeightedConcurrency

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def job(job_id: int = 1, **fields: Any) -> Job:
    base: dict[str, Any] = dict(
        id=job_id,
        type="ok",
        queue="default",
        state=State.RUNNING,
        payload={"n": job_id},
        run_at=NOW,
        priority=100,
        weight=1,
        labels={},
        windows=None,
        timeout_seconds=60.0,
        retry={"strategy": "fixed"},
        attempt=1,
        created_at=NOW,
        updated_at=NOW,
        claimed_at=NOW,
    )
    return Job(**{**base, **fields})


def seconds(at: datetime) -> float:
    return (at - NOW).total_seconds()


# -- durations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", 0.5),
        ("1s", 1.0),
        ("5m", 300.0),
        ("24h", 86400.0),
        ("7d", 604800.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        (" 2 m ", 120.0),
        ("90", 90.0),
        ("0", 0.0),
        (12, 12.0),
        (0.25, 0.25),
        ("1d2h3m4s5ms", 93784.005),
    ],
)
def test_parse_duration(text: object, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "  ",
        "abc",
        "5x",
        "1h-5m",
        "m5",
        "1m30",
        "-5",
        "-5s",
        "nan",
        "inf",
        True,
        None,
        [1],
        float("nan"),
        float("inf"),
        -1,
    ],
)
def test_parse_duration_refuses(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_parse_duration_message_names_the_units() -> None:
    with pytest.raises(ValueError, match=r"ms, s, m, h, d"):
        parse_duration("10 minutes")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (86400, "1d"),
        (172800, "2d"),
        (3600, "1h"),
        (5400, "90m"),
        (90, "90s"),
        (1, "1s"),
        (0.25, "250ms"),
        (1.5, "1.5s"),
        (1234.567, "1234.567s"),
        (1000001, "1000001s"),
        (1e-7, "0.0000001s"),
    ],
)
def test_format_duration(value: float, text: str) -> None:
    assert format_duration(value) == text
    assert parse_duration(text) == pytest.approx(value)


@given(st.integers(min_value=0, max_value=10**12))
def test_format_duration_round_trips_milliseconds(ms: int) -> None:
    value = ms / 1000
    assert parse_duration(format_duration(value)) == pytest.approx(value, rel=1e-12)


@given(st.floats(min_value=0, max_value=1e15, allow_nan=False))
def test_format_duration_is_always_parseable(value: float) -> None:
    assert parse_duration(format_duration(value)) == pytest.approx(value, rel=1e-9, abs=1e-9)


# -- lifecycle --------------------------------------------------------------------------


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
        ("scheduled", "completed"),
        ("scheduled", "failed"),
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
    assert sources_of(State.COMPLETED) == IN_FLIGHT | {State.FAILED, State.CANCELLED}


def test_unknown_state_is_refused() -> None:
    with pytest.raises(ValueError):
        check_transition("running", "exploded")


# -- retry strategies ---------------------------------------------------------------------


def exponential(**fields: Any) -> Exponential:
    return Exponential(ExponentialSettings(strategy="exponential", **fields), random.Random(7))


def test_exponential_without_jitter_doubles_up_to_the_cap() -> None:
    strategy = exponential(initial=2, multiplier=2, max=60, jitter=0)
    assert [strategy.delay_seconds(a) for a in range(1, 8)] == [2, 4, 8, 16, 32, 60, 60]


@given(
    attempt=st.integers(1, 40),
    jitter=st.floats(0, 1),
    initial=st.floats(0.001, 100),
    multiplier=st.floats(1, 10),
    seed=st.integers(0, 2**32),
)
def test_exponential_jitter_stays_within_its_bounds_and_the_cap(
    attempt: int, jitter: float, initial: float, multiplier: float, seed: int
) -> None:
    settings_ = ExponentialSettings(
        strategy="exponential", initial=initial, multiplier=multiplier, max=3600, jitter=jitter
    )
    strategy = Exponential(settings_, random.Random(seed))
    base = min(3600.0, initial * multiplier ** (attempt - 1))
    delay = strategy.delay_seconds(attempt)
    assert base * (1 - jitter) - 1e-9 <= delay <= base * (1 + jitter) + 1e-9
    assert 0 <= delay <= 3600


def test_exponential_jitter_spreads_delays() -> None:
    strategy = exponential(initial=100, multiplier=1, jitter=0.5)
    delays = {round(strategy.delay_seconds(1), 3) for _ in range(50)}
    assert len(delays) > 40
    assert min(delays) < 75 and max(delays) > 125


def test_exponential_far_past_the_cap_does_not_overflow() -> None:
    strategy = exponential(initial=1, multiplier=2, max=7200, jitter=0, max_attempts=10_000)
    assert strategy.delay_seconds(5000) == 7200
    decision = strategy.decide(job(attempt=5000), AttemptError("boom"), NOW)
    assert decision == RetryAt(NOW + timedelta(seconds=7200))


def test_exponential_decides_retry_then_gives_up() -> None:
    strategy = exponential(initial=1, multiplier=3, jitter=0, max_attempts=3)
    decisions = [strategy.decide(job(attempt=a), AttemptError("e"), NOW) for a in (1, 2, 3)]
    assert decisions == [
        RetryAt(NOW + timedelta(seconds=1)),
        RetryAt(NOW + timedelta(seconds=3)),
        GiveUp("gave up after 3 attempts: e"),
    ]


@pytest.mark.parametrize(
    "strategy",
    [exponential(jitter=0), Fixed(FixedSettings(strategy="fixed", delay=10))],
    ids=["exponential", "fixed"],
)
def test_retry_after_is_a_floor(strategy: Any) -> None:
    later = NOW + timedelta(minutes=5)
    floored = strategy.decide(job(), AttemptError("429", retry_after=later), NOW)
    assert floored == RetryAt(later)
    # A Retry-After earlier than the strategy's own delay changes nothing.
    early = strategy.decide(job(), AttemptError("429", retry_after=NOW), NOW)
    plain = strategy.decide(job(), AttemptError("429"), NOW)
    assert early == plain and plain.at > NOW


@pytest.mark.parametrize(
    "strategy",
    [exponential(), Fixed(FixedSettings(strategy="fixed")), NoRetry(NoneSettings(strategy="none"))],
    ids=["exponential", "fixed", "none"],
)
def test_non_retryable_errors_give_up(strategy: Any) -> None:
    decision = strategy.decide(job(), AttemptError("bad request", retryable=False), NOW)
    assert isinstance(decision, GiveUp) and "bad request" in decision.reason


def test_fixed_and_none() -> None:
    fixed = Fixed(FixedSettings(strategy="fixed", delay=10, max_attempts=2))
    assert fixed.decide(job(attempt=1), AttemptError("e"), NOW) == RetryAt(
        NOW + timedelta(seconds=10)
    )
    assert isinstance(fixed.decide(job(attempt=2), AttemptError("e"), NOW), GiveUp)
    assert NoRetry(NoneSettings(strategy="none")).decide(job(), AttemptError("e"), NOW) == GiveUp(
        "no retries: e"
    )


def test_strategy_settings_through_the_plugin_registry() -> None:
    strategies = RetryStrategies()
    config = {"strategy": "exponential", "initial": "2s", "max": "1h", "jitter": 0}
    built = strategies.get(config)
    assert (built.settings.initial, built.settings.max) == (2.0, 3600.0)
    assert strategies.get(dict(config)) is built  # one instance per distinct config
    assert strategies.get({}).settings.max_attempts == 25  # exponential is the default
    assert strategies.get({"strategy": "fixed", "delay": "1m"}).settings.delay == 60.0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"strategy": "nope"},
            "unknown retry strategy 'nope'; installed: exponential, fixed, none",
        ),
        ({"strategy": "fixed", "dealy": "1s"}, "dealy"),
        ({"strategy": "fixed", "delay": "soon"}, "delay"),
        ({"strategy": "exponential", "max_attempts": 0}, "max_attempts"),
        ({"strategy": "exponential", "multiplier": 0.5}, "multiplier"),
        ({"strategy": "exponential", "jitter": 2}, "jitter"),
        ({"strategy": "none", "max_attempts": 3}, "max_attempts"),
    ],
)
def test_strategy_settings_errors(config: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        RetryStrategies().validate(config)


# -- settle() ---------------------------------------------------------------------------


class Always:
    """A retry plugin that retries everything after a minute, with a new payload."""

    def decide(self, job: Job, error: AttemptError, now: datetime) -> Any:
        job.payload["touched"] = True  # must not leak into the loop's job
        return RetryAt(now + timedelta(minutes=1), {"rewritten": True})


class Returns:
    def __init__(self, decision: Any) -> None:
        self.decision = decision

    def decide(self, job: Job, error: AttemptError, now: datetime) -> Any:
        if isinstance(self.decision, Exception):
            raise self.decision
        return self.decision


FIXED = Fixed(FixedSettings(strategy="fixed", delay=10, max_attempts=3))


def test_settle_success() -> None:
    done = settle(job(), Succeeded({"ok": 1}), FIXED, NOW + timedelta(seconds=3))
    assert (done.state, done.result, done.finished_at, done.last_error) == (
        State.COMPLETED,
        {"ok": 1},
        NOW + timedelta(seconds=3),
        None,
    )
    assert done.record is not None
    assert (done.record.outcome, done.record.attempt) == ("completed", 1)
    assert done.record.started_at == NOW
    assert done.record.response == {"ok": 1}


def test_settle_cancelled() -> None:
    done = settle(job(state=State.AWAITING), Cancelled(), FIXED, NOW)
    assert (done.state, done.finished_at, done.last_error) == (
        State.CANCELLED,
        NOW,
        "cancelled by request",
    )
    assert done.record is not None and done.record.outcome == "cancelled"


def test_settle_failure_retries_through_the_strategy() -> None:
    retried = settle(job(attempt=2), Failed(AttemptError("boom")), FIXED, NOW)
    assert (retried.state, retried.run_at, retried.finished_at, retried.last_error) == (
        State.SCHEDULED,
        NOW + timedelta(seconds=10),
        None,
        "boom",
    )
    assert (retried.attempt, retried.payload) == (2, {"n": 1})
    assert retried.record is not None and retried.record.outcome == "retried"


def test_settle_failure_gives_up() -> None:
    failed = settle(job(attempt=3), Failed(AttemptError("boom")), FIXED, NOW)
    assert (failed.state, failed.finished_at) == (State.FAILED, NOW)
    assert failed.last_error == "gave up after 3 attempts: boom"
    assert failed.record is not None and failed.record.outcome == "failed"


def test_strategy_sees_a_defensive_copy_and_may_change_the_payload() -> None:
    original = job(payload={"n": 1, "nested": {"a": [1]}})
    retried = settle(original, Failed(AttemptError("boom")), Always(), NOW)
    assert retried.payload == {"rewritten": True}
    assert original.payload == {"n": 1, "nested": {"a": [1]}}


def test_non_retryable_error_fails_whatever_the_strategy_says() -> None:
    failed = settle(job(), Failed(AttemptError("will never work", retryable=False)), Always(), NOW)
    assert failed.state == State.FAILED
    assert failed.last_error == "not retryable: will never work"


@pytest.mark.parametrize(
    "answer",
    [
        RuntimeError("plugin bug"),
        None,
        "later",
        RetryAt(datetime(2026, 1, 5, 13, 0)),
        RetryAt(NOW, payload=["not", "an", "object"]),
        RetryAt(NOW, payload={"x": {1, 2}}),
    ],
    ids=["raises", "none", "string", "naive-datetime", "list-payload", "unserialisable-payload"],
)
def test_faulty_strategy_retries_later_instead_of_breaking_the_tick(answer: Any) -> None:
    retried = settle(job(), Failed(AttemptError("boom")), Returns(answer), NOW)
    assert (retried.state, retried.run_at, retried.payload) == (
        State.SCHEDULED,
        NOW + STRATEGY_FAULT_DELAY,
        {"n": 1},
    )
    assert retried.last_error is not None
    assert retried.last_error.startswith("boom (retry strategy failed: ")


def test_faulty_strategy_still_respects_retry_after() -> None:
    later = NOW + timedelta(hours=1)
    retried = settle(
        job(), Failed(AttemptError("429", retry_after=later)), Returns(RuntimeError("bug")), NOW
    )
    assert retried.run_at == later


def test_settle_refuses_a_job_that_is_not_in_flight() -> None:
    with pytest.raises(InvalidTransition):
        settle(job(state=State.SCHEDULED), Succeeded(), FIXED, NOW)
    with pytest.raises(InvalidTransition):
        settle(job(state=State.COMPLETED), Succeeded(), FIXED, NOW)


def test_defensive_copy_is_deep() -> None:
    def fields() -> dict[str, Any]:  # fresh objects each call
        return dict(
            payload={"a": {"b": [1]}},
            labels={"r": "east"},
            windows=[{"start": "05:00", "end": "06:00"}],
            retry={"strategy": "fixed"},
        )

    original = job(**fields())
    copy = original.defensive_copy()
    copy.payload["a"]["b"].append(2)
    copy.labels["r"] = "west"
    assert copy.windows is not None
    copy.windows[0]["start"] = "00:00"
    copy.retry["strategy"] = "none"
    assert original == job(**fields())


# -- throttling: the view, the chain, weighted concurrency --------------------------------


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
