"""A queue's throttler chain: its stages, built from the configuration, applied in order.

The chain is conservative by construction: a throttler counts the candidates it
admits against its own limits even if a later throttler holds them, so every
limit holds for the final set (it may admit less than it could for one tick).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hipq.config import Settings
from hipq.jobs import Job
from hipq.plugins import THROTTLERS, PluginError, build
from hipq.throttling import RunningView, Stage, Verdict, bind

log = logging.getLogger("hipq.throttling")


class ChainConfigError(ValueError):
    """A queue's throttler does not load or refuses its settings; one readable line."""


def build_stages(name: str, settings: Settings) -> list[Stage]:
    """The queue's throttler chain: the configured throttlers, then its capacity.

    Time windows are always enforced; a chain that does not list ``window`` gets it
    first. Built-ins load through their entry points, as a user's plugin does.
    """
    queue = settings.queues[name]
    stages: list[Stage] = []
    names = [next(iter(item)) for item in queue.throttlers]
    if "window" not in names:
        stages.append(Stage.of("window", build(THROTTLERS, "window", {})))
    for i, item in enumerate(queue.throttlers):
        ((plugin, raw),) = item.items()
        options = dict(raw or {})
        lets_critical = bool(options.pop("let_critical_through", False))
        try:
            throttler = build(THROTTLERS, plugin, options)
            bind(throttler, name, queue.concurrency)
        except (PluginError, ValueError) as exc:
            raise ChainConfigError(
                f"config error: queues.{name}.throttlers[{i}].{plugin}: {exc}"
            ) from None
        stages.append(Stage.of(plugin, throttler, lets_critical))
    if queue.concurrency is not None:
        # Last, so that throttlers with a preference among candidates (a share taking
        # its capacity back from borrowers) see them all; it then only trims to capacity.
        limit = {"limit": queue.concurrency}
        stages.append(Stage.of("concurrency", build(THROTTLERS, "concurrency", limit)))
    return stages


@dataclass(slots=True)
class ChainResult:
    admitted: list[Job] = field(default_factory=list)
    deferred: dict[int, datetime] = field(default_factory=dict)
    deferred_by: dict[int, str] = field(default_factory=dict)  # job id -> stage name
    held: dict[int, str] = field(default_factory=dict)
    held_by: Counter[str] = field(default_factory=Counter)  # stage name -> jobs it held
    errors: list[tuple[str, str]] = field(default_factory=list)  # (stage, message)


class ThrottlerFault(Exception):
    """A throttler raised or answered something that is not a valid verdict."""


def _checked(verdict: object, given: Mapping[int, Job], name: str) -> Verdict:
    if not isinstance(verdict, Verdict):
        raise ThrottlerFault(f"returned {type(verdict).__name__}, not a Verdict")
    decided = [*verdict.admitted, *verdict.deferred, *verdict.held]
    unknown = [i for i in decided if i not in given]
    if unknown:
        raise ThrottlerFault(f"decided on jobs it was not given: {unknown[:5]}")
    if len(decided) != len(set(decided)):
        raise ThrottlerFault("decided twice on the same job")
    for at in verdict.deferred.values():
        if not isinstance(at, datetime) or at.tzinfo is None:
            raise ThrottlerFault("deferred to something that is not an aware datetime")
    # Reasons are stored as text; anything else would fail the whole tick's transaction.
    if not all(r is None or isinstance(r, str) for r in verdict.held.values()):
        raise ThrottlerFault("held a job with a reason that is not a string")
    return verdict


def _judge(stage: Stage, survivors: list[Job]) -> tuple[set[int], list[Job]]:
    bypass = {j.id for j in survivors if j.critical and stage.lets_critical_through}
    return bypass, [j for j in survivors if j.id not in bypass]


def _record(
    result: ChainResult,
    stage: Stage,
    survivors: list[Job],
    bypass: set[int],
    judged: list[Job],
    answer: object,
) -> list[Job]:
    """Fold one stage's answer (a verdict, or the exception it raised) into ``result``."""
    by_id = {j.id: j for j in judged}
    try:
        if isinstance(answer, BaseException):
            raise answer
        verdict = _checked(answer, by_id, stage.name)
    except Exception as exc:  # a faulty plugin holds its candidates, never the queue
        log.error("throttler %s failed; it admits nothing this tick: %s", stage.name, exc)
        result.errors.append((stage.name, f"{type(exc).__name__}: {exc}"))
        verdict = Verdict(held={i: f"throttler {stage.name} failed" for i in by_id})
    admitted = set(verdict.admitted)
    result.deferred.update(verdict.deferred)
    result.deferred_by.update(dict.fromkeys(verdict.deferred, stage.name))
    for job_id in by_id:
        if job_id not in admitted and job_id not in verdict.deferred:
            result.held[job_id] = verdict.held.get(job_id) or f"held by {stage.name}"
            result.held_by[stage.name] += 1
    return [j for j in survivors if j.id in admitted or j.id in bypass]


class GuardedChain:
    """Runs a queue's stages off the event loop, each with a time limit.

    Each stage has one worker thread: a throttler that overruns its limit admits
    nothing that tick, and while it is still busy it is not called again (so a hung
    plugin costs one thread, not one per tick).
    """

    def __init__(self, stages: Sequence[Stage], time_limit: float) -> None:
        self.stages = list(stages)
        self.time_limit = time_limit
        self._executors = [
            ThreadPoolExecutor(1, thread_name_prefix=f"hipq-throttler-{s.name}") for s in stages
        ]
        self._busy: list[asyncio.Future[Any] | None] = [None] * len(self.stages)

    async def run(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> ChainResult:
        result = ChainResult()
        survivors = list(candidates)
        loop = asyncio.get_running_loop()
        for i, stage in enumerate(self.stages):
            if not survivors:
                break
            bypass, judged = _judge(stage, survivors)
            answer: object = Verdict()
            busy = self._busy[i]
            if not judged:
                pass
            elif stage.runs_inline:
                # Built-ins are pure and linear: no thread hop on every tick for them.
                seen = view.without_critical() if stage.lets_critical_through else view
                try:
                    answer = stage.throttler.decide(judged, seen, now)
                except Exception as exc:
                    answer = exc
            elif busy is not None and not busy.done():
                answer = ThrottlerFault(f"still busy after its time limit of {self.time_limit:g}s")
            else:
                seen = view.without_critical() if stage.lets_critical_through else view
                future = loop.run_in_executor(
                    self._executors[i], stage.throttler.decide, judged, seen, now
                )
                self._busy[i] = future
                try:
                    answer = await asyncio.wait_for(asyncio.shield(future), self.time_limit)
                except TimeoutError:
                    answer = ThrottlerFault(
                        f"took longer than its time limit of {self.time_limit:g}s"
                    )
                except Exception as exc:
                    answer = exc
            survivors = _record(result, stage, survivors, bypass, judged, answer)
        result.admitted = survivors
        return result

    def close(self) -> None:
        for executor in self._executors:
            executor.shutdown(wait=False, cancel_futures=True)
