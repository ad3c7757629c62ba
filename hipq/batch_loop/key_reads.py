"""Due jobs read and ordered by the values of one label: ``per_key``'s keys, and the
turns of a ``round_robin_label`` queue.

A tick's due read returns the first ``batch_size`` jobs in queue order. A backlog of
one value at the front can hide every other value behind it while capacity stays
free: ``per_key`` holds all but the first of that value, and in a queue that takes
values in turn the others would wait for the whole backlog. So when the read comes
back full, the admission reads again past the values it need not see more of (held
ones, or, for turns, every value seen so far), a few rounds at most, and decides
over all reads. Pure functions here; the reads are ``QueueBatch.job_due``'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from hipq.jobs import Job
from hipq.queue_order import job_order_key

# Extra reads per tick at most: each walks past the skipped values' backlog.
ROUNDS = 4
# The value of jobs that lack the label (they take their turn as one value).
NONE = ""


class Labelled(Protocol):
    @property
    def labels(self) -> Mapping[str, str]: ...


def value_of(job: Labelled, label: str) -> str:
    return job.labels.get(label, NONE)


def held_values(read: Iterable[Job], held: Mapping[int, str], label: str) -> list[str]:
    """The values of which a job was held: more jobs of them would be held too (a
    value's jobs are judged in queue order), so the next read skips them."""
    return sorted({value_of(j, label) for j in read if j.id in held and label in j.labels})


def seen_values(read: Iterable[Job], label: str) -> list[str]:
    """Every value the reads reached (jobs without the label are not skipped: the
    read's ``other_than`` keeps them)."""
    return sorted({j.labels[label] for j in read if label in j.labels})


def merged(order: str, aging: float | None, *reads: Iterable[Job]) -> list[Job]:
    """Several reads as one, without repeats, in queue order."""
    found: dict[int, Job] = {}
    for read in reads:
        for job in read:
            found.setdefault(job.id, job)
    return sorted(found.values(), key=lambda j: job_order_key(order, aging, j))


def in_turn(
    candidates: Sequence[Job],
    label: str,
    in_flight: Iterable[Labelled],
    order: str,
    aging: float | None,
) -> list[Job]:
    """The candidates with the label's values taking turns: a job's turn is the number
    of jobs of its value in flight plus those before it among the candidates; turns
    first, then the queue order. A value with a job running waits until every other
    value had as many."""
    turn: Counter[str] = Counter(value_of(j, label) for j in in_flight)
    keyed: list[tuple[int, tuple[Any, ...], Job]] = []
    for job in sorted(candidates, key=lambda j: job_order_key(order, aging, j)):
        value = value_of(job, label)
        keyed.append((turn[value], job_order_key(order, aging, job), job))
        turn[value] += 1
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [job for _turn, _key, job in keyed]


def turn_notes(
    queue_ordered: Sequence[Job],
    admitted: Iterable[Job],
    held: Mapping[int, str],
    label: str,
) -> dict[int, str]:
    """The reasons of held jobs that another value's turn went before: a job of
    another value, later in queue order, was admitted. Job id -> the reason, saying so
    ("round_robin tenant=A: waits its turn; <why held>")."""
    position = {job.id: n for n, job in enumerate(queue_ordered)}
    # The admitted job latest in queue order, per value.
    last: dict[str, int] = {}
    for job in admitted:
        value = value_of(job, label)
        last[value] = max(last.get(value, -1), position.get(job.id, -1))
    notes = {}
    for job in queue_ordered:
        reason = held.get(job.id)
        if reason is None or reason.startswith("round_robin"):
            continue
        value = value_of(job, label)
        if any(v != value and at > position[job.id] for v, at in last.items()):
            shown = value or "(none)"
            notes[job.id] = f"round_robin {label}={shown}: waits its turn; {reason}"
    return notes
