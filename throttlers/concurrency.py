"""Weighted concurrency: a capacity in units that in-flight jobs hold by their weight."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from hipq import Job, RunningView, ThrottlerBase, Verdict
from hipq.throttling import MAX_CAPACITY


class ConcurrencySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(
        ge=1, le=MAX_CAPACITY, description="capacity units held by running + awaiting jobs"
    )


class WeightedConcurrency(ThrottlerBase):
    """Admits candidates in queue order while their weight fits the free capacity.

    It stops at the first candidate that does not fit instead of letting lighter
    jobs behind it pass: otherwise a stream of weight-1 jobs could starve a
    weight-5 job forever.
    """

    config_model: ClassVar[type[BaseModel]] = ConcurrencySettings
    # Pure and linear in the candidates: the loop calls it without a worker thread.
    runs_inline: ClassVar[bool] = True
    # Admits a prefix of the queue order: the loop reads only the free capacity's worth
    # of due jobs (jobs heavier than the whole capacity are left out of that read).
    admits_in_order: ClassVar[bool] = True

    def __init__(self, settings: ConcurrencySettings) -> None:
        self.limit: int = settings.limit

    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        verdict = Verdict()
        in_use = view.total_weight
        blocked_by: Job | None = None
        for job in candidates:
            if job.weight > self.limit:
                # It can never fit: waiting for it would stall the whole queue forever.
                verdict.held[job.id] = f"weight {job.weight} exceeds the capacity of {self.limit}"
            elif blocked_by is None and in_use + job.weight <= self.limit:
                verdict.admitted.append(job.id)
                in_use += job.weight
            elif blocked_by is None:
                blocked_by = job
                verdict.held[job.id] = (
                    f"concurrency {in_use}/{self.limit} in use, needs {job.weight}"
                )
            else:
                verdict.held[job.id] = f"concurrency {in_use}/{self.limit} in use (queue order)"
        return verdict
