"""Which live process should run which queue: a fair share, computed alike everywhere.

Every process computes the same assignment from the same facts (the live processes,
the queues each may serve, each queue's current owner) and acts only on its own part:
it takes the queues assigned to it and hands back the others. Pure: no I/O, no clock.

The assignment only says what a process should try. The queue's lease and its fencing
token stay the one guard against two owners: snapshots read at different instants may
disagree for a moment, which costs a lease that waits a period, never a second owner.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping


def _affinity(queue: str, process: str) -> bytes:
    """A stable tie-break that favours no process across queues (rendezvous hashing)."""
    return hashlib.blake2b(f"{queue}\0{process}".encode(), digest_size=8).digest()


def assign(serves: Mapping[str, Iterable[str]], owners: Mapping[str, str]) -> dict[str, str]:
    """queue -> the process that should run it.

    ``serves``: each live process -> the queues it may serve; ``owners``: each queue's
    current live owner. Queues are taken most constrained first (fewest processes
    that may serve them), then by name. A queue stays with its owner while that owner
    may serve it and holds fewer than its share, ``ceil(Q / N)``; otherwise it goes to
    the eligible process holding the fewest, ties broken by ``_affinity``. Keeping
    owners moves as few queues as a join or a leave needs.
    """
    eligible: dict[str, list[str]] = {}
    for process, names in serves.items():
        for queue in names:
            eligible.setdefault(queue, []).append(process)
    if not eligible:
        return {}
    share = math.ceil(len(eligible) / len(serves))
    held = {process: 0 for process in serves}
    out: dict[str, str] = {}

    def kept(queue: str) -> bool:
        return owners.get(queue) in eligible[queue]

    # Within one level of constraint, owned queues first: a new queue placed early
    # must not push a later one off the process that already runs it.
    for queue in sorted(eligible, key=lambda q: (len(eligible[q]), not kept(q), q)):
        owner = owners.get(queue)
        if owner is not None and kept(queue) and held[owner] < share:
            best = owner
        else:
            best = min(eligible[queue], key=lambda p: (held[p], _affinity(queue, p)))
        out[queue] = best
        held[best] += 1
    return out


def share_of(process: str, assignment: Mapping[str, str]) -> set[str]:
    return {queue for queue, owner in assignment.items() if owner == process}
