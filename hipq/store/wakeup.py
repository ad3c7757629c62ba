"""The wake-up payloads: what new input tells the queue loops, in one process or across.

Every committed write that a loop should act on sends a payload: in this process
to the service's router at once, and on PostgreSQL also as a NOTIFY on ``CHANNEL``
to the other processes (see ``hipq.store.process_guard.PgListener``). A payload is

- ``<queue>``: new or changed jobs in a queue,
- ``*``: new responses in the inbox (a response may be for any queue),
- ``cancel:<queue>``: a running job of the queue was asked to stop, its external
  system sent a heartbeat, or an operator changed the queue's limits (the loop looks
  for all three in the same step) or paused or resumed it (this wake-up reaches a
  paused loop, which ``<queue>`` does not: a new job would only find it paused),
- ``settled:<queue>``: jobs of the queue reached a terminal state (sent on PostgreSQL
  by the jobs table's trigger, alembic 0012; it wakes ``?wait=`` requests and the
  notifier, not the loops),
- ``pull:<type>``: jobs of a pull type were claimed (``hipq.pull``: it wakes the
  workers' waiting fetches, not the loops).
- ``exec:<process>``: the owner of a queue handed jobs to that process to send
  (``hipq.batch_loop.hand_off``); it wakes that process's executor,
- ``reports:<queue>``: an executor reported on jobs of the queue; it wakes the
  queue's owner to settle them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

CHANNEL = "hipq_jobs"
_ALL_QUEUES = "*"
_CANCEL_PREFIX = "cancel:"
_SETTLED_PREFIX = "settled:"
_PULL_PREFIX = "pull:"
_EXEC_PREFIX = "exec:"
_REPORTS_PREFIX = "reports:"


class WakeKind(StrEnum):
    JOBS = "jobs"
    RESPONSES = "responses"
    CANCELS = "cancels"
    SETTLED = "settled"
    PULL = "pull"
    HANDED = "handed"
    REPORTS = "reports"


@dataclass(frozen=True, slots=True)
class Wake:
    kind: WakeKind
    queue: str | None = None  # None: every queue; for HANDED, the process


def jobs_payload(queue: str) -> str:
    return queue


def responses_payload() -> str:
    return _ALL_QUEUES


def cancels_payload(queue: str) -> str:
    return _CANCEL_PREFIX + queue


def settled_payload(queue: str) -> str:
    return _SETTLED_PREFIX + queue


def pull_payload(job_type: str) -> str:
    return _PULL_PREFIX + job_type


def handed_payload(process: str) -> str:
    return _EXEC_PREFIX + process


def reports_payload(queue: str) -> str:
    return _REPORTS_PREFIX + queue


def decode(payload: str) -> Wake:
    if payload.startswith(_PULL_PREFIX):  # its "queue" is the job type
        return Wake(WakeKind.PULL, payload.removeprefix(_PULL_PREFIX))
    if payload == _ALL_QUEUES:
        return Wake(WakeKind.RESPONSES)
    if payload.startswith(_EXEC_PREFIX):
        return Wake(WakeKind.HANDED, payload.removeprefix(_EXEC_PREFIX))
    if payload.startswith(_REPORTS_PREFIX):
        return Wake(WakeKind.REPORTS, payload.removeprefix(_REPORTS_PREFIX))
    if payload.startswith(_SETTLED_PREFIX):
        return Wake(WakeKind.SETTLED, payload.removeprefix(_SETTLED_PREFIX))
    if payload.startswith(_CANCEL_PREFIX):
        return Wake(WakeKind.CANCELS, payload.removeprefix(_CANCEL_PREFIX))
    return Wake(WakeKind.JOBS, payload)


class Wakeable(Protocol):
    """What a queue loop offers to be woken."""

    wake: asyncio.Event

    def hint_jobs(self) -> None: ...

    def hint_responses(self) -> None: ...

    def hint_cancels(self) -> None: ...

    def hint_reports(self) -> None: ...


class Wakeups:
    """Delivers payloads, from this process's store or another process's NOTIFY,
    to this process's queue loops."""

    def __init__(self, loops: Mapping[str, Wakeable]) -> None:
        self._loops = loops
        # Called with the queue of each ``settled:`` payload (waiting requests, the notifier).
        self.settled: list[Callable[[str], None]] = []
        # Called with the job type of each ``pull:`` payload (the workers' fetches).
        self.pulled: list[Callable[[str], None]] = []
        # Called with the process of each ``exec:`` payload (this process's executor).
        self.handed: list[Callable[[str], None]] = []

    def deliver(self, payload: str) -> None:
        wake = decode(payload)
        if wake.kind is WakeKind.PULL:
            for listener in self.pulled:
                listener(wake.queue or "")
            return
        if wake.kind is WakeKind.SETTLED:
            for listener in self.settled:
                listener(wake.queue or "")
            return
        if wake.kind is WakeKind.HANDED:
            for listener in self.handed:
                listener(wake.queue or "")
            return
        if wake.kind is WakeKind.RESPONSES:
            for each in self._loops.values():
                each.hint_responses()
            return
        loop = self._loops.get(wake.queue or "")
        if loop is None:
            return
        if wake.kind is WakeKind.CANCELS:
            loop.hint_cancels()
        elif wake.kind is WakeKind.REPORTS:
            loop.hint_reports()
        else:
            loop.hint_jobs()

    def all(self) -> None:
        """New responses: every loop looks at the inbox."""
        self.deliver(responses_payload())
