"""Adaptive: a start rate that follows what the external system can take (AIMD).

``{initial: 20, per: 1s}`` starts at 20 starts per second and then adapts:

- an answer of 429 or 503 (the system is over its capacity), or one slower than
  ``latency`` when that is set, multiplies the rate by ``decrease`` (0.7), at most
  once per burst: answers to jobs claimed before the last decrease were sent at the
  old rate and are not counted again;
- a ``Retry-After`` on such an answer stops all starts (of that label value) until
  the instant it names;
- every ``per`` in which it held jobs for its rate and heard no such answer, the
  rate grows by ``increase`` (1), up to ``max``. A rate that is not reached (too
  few jobs) does not grow.

With ``label`` each value of the label (each tenant, each region's endpoint) has
a rate of its own. Starts are counted as ``rate`` does: from the loop's view of
recent starts, in any sliding window of ``per``, and paced: at most a quarter of
them in any quarter of ``per``. What it learned is kept in
memory: a new owner of the queue starts again from ``initial``. Its state is shown
in GET /v1/queues/{name} and as ``hipq_throttler_rate``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hipq import Feedback, Job, RunningView, ThrottlerBase, Verdict
from hipq.durations import MAX_DURATION_SECONDS, format_duration, parse_duration

# Starts are paced: at most a 1/_SLICES share of the rate in any 1/_SLICES of the
# window, so that a whole window's starts do not leave in one burst (a peer that
# counts its own window, offset from ours by the send's delay, would see two bursts).
_SLICES = 4


class AdaptiveSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    initial: float = Field(gt=0, description="starts per `per` to begin with")
    per: float = Field(1.0, description="the window, a duration such as '1s'")
    min: float = Field(1.0, gt=0, description="the rate never falls below this")
    max: float | None = Field(None, gt=0, description="the rate never grows above this")
    increase: float = Field(1.0, gt=0, description="added per window of good answers")
    decrease: float = Field(0.7, gt=0, lt=1, description="factor on an overload answer")
    latency: float | None = Field(
        None, description="answers slower than this (a duration) count as overload"
    )
    label: str | None = Field(None, min_length=1, description="one rate per value of this label")

    @field_validator("per", mode="before")
    @classmethod
    def _per(cls, value: Any) -> float:
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("per must be longer than 0, e.g. '1s'")
        if seconds > MAX_DURATION_SECONDS:
            raise ValueError("per must be at most 3650d")
        return seconds

    @field_validator("latency", mode="before")
    @classmethod
    def _latency(cls, value: Any) -> float | None:
        if value is None:
            return None
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("latency must be longer than 0, e.g. '2s'")
        if seconds > MAX_DURATION_SECONDS:
            raise ValueError("latency must be at most 3650d")
        return seconds

    @model_validator(mode="after")
    def _bounds(self) -> AdaptiveSettings:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max:g}) is below min ({self.min:g})")
        if not self.min <= self.initial <= (self.max or self.initial):
            raise ValueError("initial must lie between min and max")
        return self


@dataclass(slots=True)
class _Key:
    """What it learned of one label value (or of the whole queue)."""

    rate: float
    changed_at: datetime | None = None  # of the last decrease or increase
    decreased_at: datetime | None = None
    paused_until: datetime | None = None
    limited: bool = False  # held a job for its rate since the last change
    overloads: int = 0  # overload answers seen, counted or not


class Adaptive(ThrottlerBase):
    config_model: ClassVar[type[BaseModel]] = AdaptiveSettings
    # Pure and linear in the candidates, and its feedback arrives on the event loop:
    # deciding there too means no lock between the two.
    runs_inline: ClassVar[bool] = True

    def __init__(self, settings: AdaptiveSettings) -> None:
        self.settings = settings
        self.label = settings.label
        self.per = timedelta(seconds=settings.per)
        self.lookback_seconds: float = settings.per
        self._per_text = format_duration(settings.per)
        self._keys: dict[str | None, _Key] = {}

    def _key(self, labels: Mapping[str, str]) -> str | None:
        return labels.get(self.label) if self.label else None

    def _state(self, key: str | None) -> _Key:
        state = self._keys.get(key)
        if state is None:
            if len(self._keys) >= 10_000:  # label values come from jobs: stay bounded
                self._keys.clear()
            state = self._keys[key] = _Key(self.settings.initial)
        return state

    def _name(self, key: str | None) -> str:
        if self.label is None:
            return "adaptive"
        return f"adaptive {self.label}={key}" if key is not None else f"adaptive (no {self.label})"

    # -- what the external system answered -------------------------------------

    def on_feedback(self, feedback: Feedback) -> None:
        s = self.settings
        state = self._state(self._key(feedback.labels))
        slow = s.latency is not None and (feedback.latency_seconds or 0.0) > s.latency
        if feedback.overloaded or slow:
            state.overloads += 1
            if feedback.retry_after is not None and feedback.overloaded:
                if state.paused_until is None or feedback.retry_after > state.paused_until:
                    state.paused_until = feedback.retry_after
            # One decrease per burst: a job claimed before the last decrease went out
            # at the old rate, and its answer says nothing new.
            if (
                state.decreased_at is not None
                and feedback.claimed_at is not None
                and feedback.claimed_at <= state.decreased_at
            ):
                return
            state.rate = max(s.min, state.rate * s.decrease)
            state.changed_at = state.decreased_at = feedback.at
            state.limited = False
            return
        if feedback.status is not None:
            return  # another error: says nothing about the system's capacity
        if not state.limited:
            return  # the rate was not the limit: no evidence that more would be fine
        if state.changed_at is None or feedback.at - state.changed_at >= self.per:
            grown = state.rate + s.increase
            state.rate = grown if s.max is None else min(s.max, grown)
            state.changed_at = feedback.at
            state.limited = False

    # -- admission -----------------------------------------------------------------

    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        since, recently = now - self.per, now - self.per / _SLICES
        label = self.label
        started: Counter[str | None] = Counter()
        lately: Counter[str | None] = Counter()
        for s in view.recent_starts:
            if s.at > since:
                key = s.labels.get(label) if label else None
                started[key] += 1
                if s.at > recently:
                    lately[key] += 1
        verdict = Verdict()
        for job in candidates:
            key = self._key(job.labels)
            state = self._state(key)
            if state.paused_until is not None:
                if state.paused_until > now:
                    until = state.paused_until.strftime("%H:%M:%S")
                    verdict.held[job.id] = f"{self._name(key)} paused until {until} (Retry-After)"
                    continue
                state.paused_until = None
            allowed = max(1, int(state.rate))
            if started[key] < allowed and lately[key] < math.ceil(allowed / _SLICES):
                verdict.admitted.append(job.id)
                started[key] += 1
                lately[key] += 1
            else:
                state.limited = True
                rate = f"{state.rate:.4g}"
                verdict.held[job.id] = f"{self._name(key)} {rate} per {self._per_text} reached"
        return verdict

    def state(self) -> Mapping[str, Any]:
        """Per label value (``*`` without a label): the rate now and what moved it."""
        out: dict[str, Any] = {}
        for key, state in sorted(self._keys.items(), key=lambda kv: str(kv[0])):
            name = "*" if self.label is None else (key if key is not None else "(none)")
            out[name] = {
                "rate": round(state.rate, 3),
                "per": self.settings.per,
                "overloads": state.overloads,
                "paused_until": None
                if state.paused_until is None
                else state.paused_until.isoformat(),
            }
        return out
