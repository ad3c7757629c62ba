"""Who runs what now, for the processes page (as Sidekiq's Busy tab): each running
job under the process that sends it (the one it was handed to, else its queue's
owner), and the pull jobs under the worker that fetched them. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hipq.store.operator_reads import BusyJob
from hipq.store.processes import ProcessInfo


@dataclass
class Busy:
    by_process: dict[str, list[BusyJob]] = field(default_factory=dict)
    handed: dict[str, int] = field(default_factory=dict)  # jobs handed to each process
    by_worker: dict[str, list[BusyJob]] = field(default_factory=dict)
    unplaced: list[BusyJob] = field(default_factory=list)  # its sender is not live


def place(found: Sequence[BusyJob], processes: Sequence[ProcessInfo]) -> Busy:
    busy = Busy(
        by_process={p.id: [] for p in processes}, handed=dict.fromkeys((p.id for p in processes), 0)
    )
    owner_of = {q: p.id for p in processes for q in p.owned}
    for job in found:
        if job.worker is not None:
            busy.by_worker.setdefault(job.worker, []).append(job)
            continue
        sender = job.executor or owner_of.get(job.queue)
        if sender in busy.by_process:
            busy.by_process[sender].append(job)
            if job.executor is not None:
                busy.handed[sender] += 1
        else:
            busy.unplaced.append(job)
    return busy
