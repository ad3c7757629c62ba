"""Rate: at most ``limit`` job starts in any sliding window of ``per``, overall or per label value.

``{limit: 50, per: 1s}`` caps the queue at 50 starts in any one second;
``{limit: 5, per: 1m, label: region}`` gives each region its own 5 per minute
(jobs without the label share one bucket). It counts starts, not weight.

The starts come from the database (the loop fills ``view.recent_starts`` with at
least ``lookback_seconds`` of history, finished jobs included), so the limit holds
across restarts and across processes. A candidate is admitted at ``now`` only when
fewer than ``limit`` starts fall in ``(now - per, now]``; that keeps every window
of length ``per`` at or below the limit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hipq import Job, RunningView, ThrottlerBase, Verdict
from hipq.durations import MAX_DURATION_SECONDS, format_duration, parse_duration
from hipq.throttling import MAX_CAPACITY


class RateSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(ge=1, le=MAX_CAPACITY, description="starts allowed in any window of `per`")
    per: float = Field(description="the window, a duration such as '1s' or '5m'")
    label: str | None = Field(
        None, min_length=1, description="count per value of this label instead of overall"
    )

    @field_validator("per", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("per must be longer than 0, e.g. '1s' or '1m'")
        if seconds > MAX_DURATION_SECONDS:
            raise ValueError("per must be at most 3650d")
        return seconds


class Rate(ThrottlerBase):
    config_model: ClassVar[type[BaseModel]] = RateSettings
    # Pure and linear in the candidates: the loop calls it without a worker thread.
    runs_inline: ClassVar[bool] = True

    def __init__(self, settings: RateSettings) -> None:
        self.settings = settings
        self.limit: int = settings.limit
        self.label = settings.label
        self.per = timedelta(seconds=settings.per)
        self.lookback_seconds: float = settings.per  # how much start history the loop loads
        self._per_text = format_duration(settings.per)

    def _reason(self, key: str | None) -> str:
        limit = f"{self.limit} per {self._per_text} reached"
        if self.label is None:
            return f"rate {limit}"
        if key is None:
            return f"rate (no {self.label}) {limit}"
        return f"rate {self.label}={key} {limit}"

    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        since = now - self.per
        label = self.label
        # Starts stamped after `now` (another process's clock runs ahead) count too,
        # so clock skew between processes cannot let a burst through.
        started: Counter[str | None] = Counter(
            s.labels.get(label) if label else None for s in view.recent_starts if s.at > since
        )
        verdict = Verdict()
        for job in candidates:
            key = job.labels.get(label) if label else None
            if started[key] < self.limit:
                verdict.admitted.append(job.id)
                started[key] += 1  # the view does not hold this tick's own admissions
            else:
                verdict.held[job.id] = self._reason(key)
        return verdict
