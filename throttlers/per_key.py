"""Per-key concurrency: at most ``limit`` in-flight jobs per value of a label or payload field.

``{key: labels.tenant, limit: 2}`` lets each tenant have two jobs running or
awaiting at once; ``limit: 1`` runs the jobs of one key in series, in queue order
(graphile-worker's named queues). ``key`` is ``labels.<name>`` or a dotted path
into the payload such as ``payload.customer.id``.

By default it counts jobs, whatever their weight (``count: weight`` sums weights
instead, and then a job that does not fit holds the later jobs of its key). Jobs
without the key are not limited (``missing: pass``) or held (``missing: hold``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hipq import Job, RunningView, ThrottlerBase, Verdict
from hipq.throttling import MAX_CAPACITY

_KEY = re.compile(r"^(labels\.[^.]+|payload(\.[^.]+)+)$")
_SHOWN = 60  # characters of a key value a reason shows


class PerKeySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(description="labels.<name> or payload.<field>[.<field>...]")
    limit: int = Field(
        ge=1, le=MAX_CAPACITY, description="in-flight jobs (or weight) per key value"
    )
    missing: Literal["pass", "hold"] = Field(
        "pass", description="jobs without the key: not limited (pass) or held (hold)"
    )
    count: Literal["jobs", "weight"] = Field("jobs", description="what the limit counts")

    @field_validator("key")
    @classmethod
    def _key_path(cls, value: str) -> str:
        if not _KEY.match(value):
            raise ValueError(
                f"key must be 'labels.<name>' or 'payload.<field>[.<field>...]', got {value!r}"
            )
        return value


def _key_value(path: tuple[str, ...], labels: Mapping[str, str], payload: Any) -> str | None:
    """The key of a job as text, or None when it has none (a JSON null counts as none)."""
    source, *fields = path
    value: Any = labels if source == "labels" else payload
    for name in fields:
        if not isinstance(value, Mapping) or name not in value:
            return None
        value = value[name]
    if value is None:
        return None
    if isinstance(value, str):
        return value
    # 17 and "17" are one key: reasons show both as 17, so they must be counted as one.
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class PerKey(ThrottlerBase):
    config_model: ClassVar[type[BaseModel]] = PerKeySettings
    # Pure and linear in the candidates: the loop calls it without a worker thread.
    runs_inline: ClassVar[bool] = True

    def __init__(self, settings: PerKeySettings) -> None:
        self.settings = settings
        self.limit: int = settings.limit
        self.path = tuple(settings.key.split("."))
        # Reasons show a label by its name ("tenant=acme"), a payload field by its path.
        self.name = self.path[1] if self.path[0] == "labels" else settings.key
        self.by_weight = settings.count == "weight"
        # A label key: after a full read, the loop reads past the values it held (a
        # payload field has no such read: its jobs are seen in queue order only).
        self.scan_keys = self.path[1] if self.path[0] == "labels" else None

    def _shown(self, value: str) -> str:
        text = value if len(value) <= _SHOWN else value[: _SHOWN - 1] + "…"
        return f"{self.name}={text}"

    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        in_flight: Counter[str] = Counter()
        for running in view.jobs:
            key = _key_value(self.path, running.labels, running.payload)
            if key is not None:
                in_flight[key] += running.weight if self.by_weight else 1
        verdict = Verdict()
        blocked: dict[str, str] = {}
        for job in candidates:
            key = _key_value(self.path, job.labels, job.payload)
            if key is None:
                if self.settings.missing == "pass":
                    verdict.admitted.append(job.id)
                else:
                    verdict.held[job.id] = f"per_key: job has no {self.name}"
                continue
            need = job.weight if self.by_weight else 1
            if need > self.limit:
                verdict.held[job.id] = (
                    f"per_key {self._shown(key)}: weight {need} exceeds the limit {self.limit}"
                )
            elif key in blocked:
                verdict.held[job.id] = blocked[key]
            elif in_flight[key] + need <= self.limit:
                verdict.admitted.append(job.id)
                in_flight[key] += need
            else:
                blocked[key] = f"per_key {self._shown(key)} {in_flight[key]}/{self.limit} in flight"
                verdict.held[job.id] = blocked[key]
        return verdict
