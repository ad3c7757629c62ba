"""Percentage shares of a capacity by the value of one label.

``{label: region, shares: {east: 40, north: 30, west: 30}}`` gives each value a
quota of ``floor(capacity * percent / 100)`` capacity units; in-flight jobs hold
their weight of their share. Jobs whose label is missing or not listed form one
more bucket whose percent is ``other`` (default 0: such jobs are held).

``lend: false`` (the default): a share never holds more than its quota, even while
other shares sit idle.

``lend: true`` (work-conserving): a busy share may borrow what idle shares leave
unused, and the total never exceeds the capacity. Capacity is taken back first:
each tick, every share's own jobs within its quota are served before any borrower,
and the remaining quota of a share whose next job fits in it is not lent out.
Running jobs are never preempted, so capacity that was lent out returns to its
owner as the borrowers' jobs finish; until then the owner's jobs wait with a
reason that says so. A share whose next job needs more than its remaining quota
borrows like any other share, so a job heavier than its share's whole quota only
runs when other shares leave room for it.

Within a share, candidates start in queue order: a job that does not fit holds the
jobs of its share behind it (a stream of light jobs cannot starve a heavy one),
but never the jobs of other shares. A job that can never fit (heavier than its
quota, or than the capacity when lending) is held without blocking its share.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hipq import Job, RunningView, ScanGroups, ThrottlerBase, Verdict
from hipq.throttling import MAX_CAPACITY

# The bucket of jobs whose label is missing or not listed (only when ``other`` > 0).
OTHER = object()
Bucket = Hashable  # a label value (str) or OTHER


class SharesSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = Field(min_length=1, description="the label whose value picks the share")
    shares: dict[str, float] = Field(description="percent of the capacity per label value")
    capacity: int | None = Field(
        None, ge=1, le=MAX_CAPACITY, description="capacity units; default: the queue's concurrency"
    )
    other: float = Field(0, ge=0, le=100, description="percent for missing and unlisted values")
    lend: bool = Field(False, description="let busy shares borrow what idle shares leave unused")

    @field_validator("shares", mode="before")
    @classmethod
    def _label_values_are_strings(cls, value: Any) -> Any:
        # YAML reads `{1: 50}` with an int key; label values are always strings.
        if isinstance(value, dict):
            return {
                str(k) if isinstance(k, int) and not isinstance(k, bool) else k: v
                for k, v in value.items()
            }
        return value

    @field_validator("shares")
    @classmethod
    def _positive_shares(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError("list at least one label value with its percent")
        for name, percent in value.items():
            if not math.isfinite(percent) or percent <= 0:
                raise ValueError(f"share {name!r} must be a percent above 0, got {percent}")
        return value

    @model_validator(mode="after")
    def _fits_in_100(self) -> SharesSettings:
        total = sum(map(_exact, self.shares.values())) + _exact(self.other)
        if total > 100:
            raise ValueError(f"shares and other add up to {float(total):g} %, more than 100 %")
        if self.capacity is not None:
            _quotas(self, self.capacity)  # a share too small for the capacity fails at start
        return self


def _exact(percent: float) -> Fraction:
    # Via the decimal text, so that 100 * 29 / 100 is exactly 29, not 28.999...
    return Fraction(repr(percent))


def _quota(capacity: int, percent: float) -> int:
    return math.floor(capacity * _exact(percent) / 100)


def _quotas(settings: SharesSettings, capacity: int) -> dict[Bucket, int]:
    percents: dict[Bucket, float] = {value: p for value, p in settings.shares.items()}
    if settings.other > 0:
        percents[OTHER] = settings.other
    quotas: dict[Bucket, int] = {}
    for bucket, percent in percents.items():
        quotas[bucket] = _quota(capacity, percent)
        if quotas[bucket] < 1:
            name = "other" if bucket is OTHER else f"share {bucket!r}"
            raise ValueError(
                f"{name}: {percent:g} % of a capacity of {capacity} is less than one unit"
            )
    return quotas


@dataclass(slots=True)
class _Share:
    """One bucket's state while deciding a tick."""

    quota: int
    used: int = 0
    # None while the share still admits; else the reason every later job of it gets.
    blocked: str | None = None
    # True when its next job fits in its own quota but the capacity is lent out:
    # its remaining quota is then not lent to anyone else.
    reserves: bool = False
    borrowing: bool = False  # its next job needs more than its remaining quota


class Shares(ThrottlerBase):
    config_model: ClassVar[type[BaseModel]] = SharesSettings
    # Pure and linear in the candidates: the loop calls it without a worker thread.
    runs_inline: ClassVar[bool] = True

    def __init__(self, settings: SharesSettings) -> None:
        self.settings = settings
        self.label: str = settings.label
        # Each share's due jobs are read on their own when the queue's backlog is
        # larger than a batch: a full share must not hide the others' jobs.
        self.scan_groups = ScanGroups(
            settings.label, tuple(settings.shares), others=settings.other > 0
        )
        self.capacity: int | None = None
        self.quotas: dict[Bucket, int] = {}
        if settings.capacity is not None:
            self._set_capacity(settings.capacity)

    def bind(self, queue: str, capacity: int | None) -> None:
        """Take the queue's concurrency as the capacity unless the settings name one."""
        if self.settings.capacity is not None:
            return
        if capacity is None:
            raise ValueError("share needs a capacity: set capacity or the queue's concurrency")
        self._set_capacity(capacity)

    def _set_capacity(self, capacity: int) -> None:
        self.quotas = _quotas(self.settings, capacity)
        self.capacity = capacity

    # --- naming ------------------------------------------------------------------------

    def _bucket(self, labels: Mapping[str, str]) -> Bucket | None:
        value = labels.get(self.label)
        if value in self.quotas:
            return value
        return OTHER if OTHER in self.quotas else None

    def _name(self, bucket: Bucket) -> str:
        return f"{self.label}=(other)" if bucket is OTHER else f"{self.label}={bucket}"

    def _no_share(self, job: Job) -> str:
        value = job.labels.get(self.label)
        if value is None:
            return f"share: no share for jobs without {self.label}"
        return f"share: no share for {self.label}={value}"

    # --- deciding ----------------------------------------------------------------------

    def scan_room(self, view: RunningView) -> set[str | None]:
        """Shares (None: ``other``) that could take another job given ``view``: worth
        a read of their own when the queue's backlog is larger than a batch."""
        used = self._used(view)
        room = {b for b, quota in self.quotas.items() if used[b] < quota}
        if self.settings.lend and self.capacity is not None and view.total_weight < self.capacity:
            room = set(self.quotas)  # any share may borrow
        return {None if b is OTHER else str(b) for b in room}

    def _used(self, view: RunningView) -> Counter[Bucket]:
        used: Counter[Bucket] = Counter()
        for job in view.jobs:
            bucket = self._bucket(job.labels)
            if bucket is not None:
                used[bucket] += job.weight
        return used

    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        if self.capacity is None:
            raise RuntimeError("share has no capacity: it was not bound to its queue")
        used = self._used(view)
        shares = {b: _Share(quota=q, used=used[b]) for b, q in self.quotas.items()}
        if self.settings.lend:
            return self._lending(candidates, shares, view.total_weight, self.capacity)
        return self._strict(candidates, shares)

    def _strict(self, candidates: Sequence[Job], shares: dict[Bucket, _Share]) -> Verdict:
        verdict = Verdict()
        for job in candidates:
            bucket = self._bucket(job.labels)
            if bucket is None:
                verdict.held[job.id] = self._no_share(job)
                continue
            share = shares[bucket]
            name = self._name(bucket)
            if job.weight > share.quota:
                verdict.held[job.id] = (
                    f"share {name}: weight {job.weight} exceeds its quota {share.quota}"
                )
            elif share.blocked is not None:
                verdict.held[job.id] = share.blocked
            elif share.used + job.weight <= share.quota:
                verdict.admitted.append(job.id)
                share.used += job.weight
            else:
                share.blocked = f"share {name} {share.used}/{share.quota} in use"
                verdict.held[job.id] = share.blocked + _needs(job)
        return verdict

    def _lending(
        self, candidates: Sequence[Job], shares: dict[Bucket, _Share], in_use: int, capacity: int
    ) -> Verdict:
        verdict = Verdict()
        admitted: set[int] = set()
        borrowers: list[tuple[Job, Bucket]] = []
        # Pass 1: every share's own jobs within its quota, in queue order.
        for job in candidates:
            bucket = self._bucket(job.labels)
            if bucket is None:
                verdict.held[job.id] = self._no_share(job)
                continue
            share = shares[bucket]
            name = self._name(bucket)
            if job.weight > capacity:
                verdict.held[job.id] = (
                    f"share {name}: weight {job.weight} exceeds the capacity {capacity}"
                )
            elif share.blocked is not None:
                verdict.held[job.id] = share.blocked
            elif share.borrowing or share.used + job.weight > share.quota:
                share.borrowing = True
                borrowers.append((job, bucket))
            elif in_use + job.weight <= capacity:
                admitted.add(job.id)
                share.used += job.weight
                in_use += job.weight
            else:
                # Its own quota has room but the capacity is lent out: wait for borrowers
                # to finish, and keep the room from being lent again meanwhile.
                share.reserves = True
                share.blocked = (
                    f"share {name} {share.used}/{share.quota} in use, "
                    f"capacity {in_use}/{capacity} in use (lent out)"
                )
                verdict.held[job.id] = share.blocked + _needs(job)
        # Pass 2: borrowers, in queue order, from what no waiting owner claims.
        for job, bucket in borrowers:
            share = shares[bucket]
            if share.blocked is not None:
                verdict.held[job.id] = share.blocked
                continue
            claimed = sum(
                max(0, s.quota - s.used) for b, s in shares.items() if s.reserves and b != bucket
            )
            free = capacity - in_use - claimed
            if job.weight <= free:
                admitted.add(job.id)
                share.used += job.weight
                in_use += job.weight
            else:
                share.blocked = (
                    f"share {self._name(bucket)} {share.used}/{share.quota} in use, "
                    f"{max(free, 0)} free to borrow"
                )
                verdict.held[job.id] = share.blocked + _needs(job)
        verdict.admitted = [job.id for job in candidates if job.id in admitted]
        return verdict


def _needs(job: Job) -> str:
    return f", needs {job.weight}" if job.weight > 1 else ""
