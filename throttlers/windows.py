"""Time windows: a job starts only inside one of its own ``windows``.

A candidate found outside its windows is deferred to the next opening (no attempt
is used). hipq always enforces windows: a queue that does not list ``window`` in
its chain gets this stage first.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any, ClassVar

import orjson
from pydantic import BaseModel, ConfigDict

from hipq import Job, RunningView, ThrottlerBase, Verdict
from hipq.windows import Window, is_open, next_opening, parse_windows


class WindowSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")


@lru_cache(maxsize=4096)
def _parsed(raw: bytes) -> tuple[Window, ...]:
    return parse_windows(orjson.loads(raw))


def job_windows(windows: list[dict[str, Any]] | None) -> tuple[Window, ...]:
    if not windows:
        return ()
    return _parsed(orjson.dumps(windows, option=orjson.OPT_SORT_KEYS))


class TimeWindows(ThrottlerBase):
    config_model: ClassVar[type[BaseModel]] = WindowSettings
    # Pure and linear in the candidates: the loop calls it without a worker thread.
    runs_inline: ClassVar[bool] = True
    # Defers, never holds: it does not stop the loop from reading only free capacity.
    admits_in_order: ClassVar[bool] = True
    defer_reason: ClassVar[str | None] = "outside its time windows"

    def __init__(self, settings: WindowSettings | None = None) -> None:
        self.settings = settings

    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        verdict = Verdict()
        for job in candidates:
            windows = job_windows(job.windows)
            if not windows or is_open(windows, now):
                verdict.admitted.append(job.id)
            else:
                verdict.deferred[job.id] = next_opening(windows, now)
        return verdict
