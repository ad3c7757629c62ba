"""No tenant takes more than ``percent`` of the queue's capacity.

queues:
  default:
    concurrency: 100
    throttlers:
      - tenant_cap: {label: tenant, percent: 20}
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from hipq import Job, RunningView, ThrottlerBase, Verdict


class TenantCapSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = "tenant"
    percent: float = Field(gt=0, le=100)


class TenantCap(ThrottlerBase):
    config_model: ClassVar[type[BaseModel]] = TenantCapSettings

    def __init__(self, settings: TenantCapSettings) -> None:
        self.settings = settings
        self.label: str = settings.label  # hipq shows capacity in use per value of this label
        self.cap = 0

    def bind(self, queue: str, capacity: int | None) -> None:
        if capacity is None:
            raise ValueError("tenant_cap needs the queue's concurrency")
        self.cap = int(capacity * self.settings.percent // 100)

    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        verdict = Verdict()
        in_use: Counter[str | None] = view.weight_by(self.label)
        for job in candidates:
            tenant = job.labels.get(self.label)
            if in_use[tenant] + job.weight <= self.cap:
                verdict.admitted.append(job.id)
                in_use[tenant] += job.weight  # count what this tick admits too
            else:
                verdict.held[job.id] = (
                    f"tenant_cap {self.label}={tenant} {in_use[tenant]}/{self.cap}"
                )
        return verdict
