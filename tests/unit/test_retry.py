"""Retry strategies: exponential, fixed, none, through the plugin registry."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
from tests.factories import NOW
from tests.factories import numbered_job as job


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
