"""Retry strategies: plugins of the entry-point group ``hipq.retry_strategies``.

A strategy is built once per distinct config and then asked, for each failed
attempt, with a defensive copy of the job: retry at some instant (optionally with
a new payload), or give up.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hipq.durations import MAX_DURATION_SECONDS, parse_duration
from hipq.jobs import Job


@dataclass(frozen=True, slots=True)
class AttemptError:
    """Why an attempt failed, as the strategy sees it."""

    message: str
    kind: str = "error"  # error | timeout | http_status | send
    retryable: bool = True
    retry_after: datetime | None = None  # a floor the peer asked for (e.g. HTTP Retry-After)


@dataclass(frozen=True, slots=True)
class RetryAt:
    at: datetime
    payload: dict[str, Any] | None = None  # None keeps the job's payload


@dataclass(frozen=True, slots=True)
class GiveUp:
    reason: str


RetryDecision = RetryAt | GiveUp


@runtime_checkable
class RetryStrategy(Protocol):
    """What a retry plugin implements. ``config_model`` validates its settings at start."""

    def decide(self, job: Job, error: AttemptError, now: datetime) -> RetryDecision: ...


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    strategy: str
    max_attempts: int = Field(25, ge=1, le=10_000)


def _seconds(value: object) -> float:
    seconds = parse_duration(value)
    if seconds > MAX_DURATION_SECONDS:  # now + the delay would overflow a datetime
        raise ValueError("must be at most 3650d")
    return seconds


class ExponentialSettings(_Settings):
    initial: float = 1.0
    multiplier: float = Field(2.0, ge=1.0, le=100.0)
    max: float = 3600.0
    jitter: float = Field(0.1, ge=0.0, le=1.0)  # +- this fraction of the delay

    _durations = field_validator("initial", "max", mode="before")(_seconds)


class FixedSettings(_Settings):
    delay: float = 10.0
    _durations = field_validator("delay", mode="before")(_seconds)


class NoneSettings(_Settings):
    max_attempts: int = Field(1, ge=1, le=1)


def _give_up_or(job: Job, error: AttemptError, max_attempts: int) -> GiveUp | None:
    if not error.retryable:
        return GiveUp(f"not retryable: {error.message}")
    if job.attempt >= max_attempts:
        return GiveUp(f"gave up after {job.attempt} attempts: {error.message}")
    return None


def _not_before(at: datetime, error: AttemptError) -> datetime:
    return max(at, error.retry_after) if error.retry_after else at


class Exponential:
    """delay = initial * multiplier^(attempt-1), capped at ``max``, with +-jitter."""

    config_model: ClassVar[type[BaseModel]] = ExponentialSettings

    def __init__(self, settings: ExponentialSettings, rng: random.Random | None = None) -> None:
        self.settings = settings
        self._rng = rng or random.Random()

    def delay_seconds(self, attempt: int) -> float:
        s = self.settings
        try:
            base = min(s.max, s.initial * s.multiplier ** max(0, attempt - 1))
        except OverflowError:  # a float power overflows near 2**1024: far past any cap
            base = s.max if s.initial > 0 else 0.0
        spread = base * s.jitter
        # The cap holds after jitter too: ``max`` is a promise to the operator.
        return min(s.max, max(0.0, base + self._rng.uniform(-spread, spread)))

    def decide(self, job: Job, error: AttemptError, now: datetime) -> RetryDecision:
        stop = _give_up_or(job, error, self.settings.max_attempts)
        if stop:
            return stop
        at = now + timedelta(seconds=self.delay_seconds(job.attempt))
        return RetryAt(_not_before(at, error))


class Fixed:
    config_model: ClassVar[type[BaseModel]] = FixedSettings

    def __init__(self, settings: FixedSettings) -> None:
        self.settings = settings

    def decide(self, job: Job, error: AttemptError, now: datetime) -> RetryDecision:
        stop = _give_up_or(job, error, self.settings.max_attempts)
        if stop:
            return stop
        return RetryAt(_not_before(now + timedelta(seconds=self.settings.delay), error))


class NoRetry:
    config_model: ClassVar[type[BaseModel]] = NoneSettings

    def __init__(self, settings: NoneSettings) -> None:
        self.settings = settings

    def decide(self, job: Job, error: AttemptError, now: datetime) -> RetryDecision:
        return GiveUp(f"no retries: {error.message}")


# The built-in strategies' settings, by name: what a bound on a token reads.
_BUILT_IN: dict[str, type[_Settings]] = {
    "exponential": ExponentialSettings,
    "fixed": FixedSettings,
    "none": NoneSettings,
}


def retry_bounds(config: Mapping[str, Any]) -> tuple[int, float] | None:
    """(most attempts, shortest delay in seconds) of a built-in strategy's ``config``
    (validated already); None for a plugin's, whose delays hipq cannot know. A strategy
    that never retries waits for ever."""
    model = _BUILT_IN.get(str(config.get("strategy")))
    if model is None:
        return None
    s = model.model_validate(config)
    if isinstance(s, ExponentialSettings):
        return s.max_attempts, min(s.max, s.initial) * (1 - s.jitter)
    if isinstance(s, FixedSettings):
        return s.max_attempts, s.delay
    return s.max_attempts, math.inf
