"""Jobs suggested for a response that no open job's key matched: an operator matching
it by hand most often looks for a typo on the other side ("A-71" for "A-17") or for
the job of the response's type that still waits.

The store gives a bounded sample (``Store.job_in_flight_sample``, ``Store.job_keys_from``);
the ranking here is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hipq.service import Service
from hipq.store.operator_reads import KeyedJob
from hipq.store.records import Response

SUGGESTED = 5  # candidates shown per response
COMPARED_CHARS = 64  # of each key: the edit distance is quadratic in the length


@dataclass(frozen=True, slots=True)
class Candidate:
    job: KeyedJob
    why: str  # e.g. "key 2 edits away", "awaiting, of type charge"


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: single-character insertions, deletions and substitutions."""
    a, b = a[:COMPARED_CHARS], b[:COMPARED_CHARS]
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def close_enough(key: str) -> int:
    """The most edits a key may be from ``key`` to be suggested: a third of it, at least 2."""
    return max(2, len(key) // 3)


def prefix_of(key: str) -> str:
    """The part of ``key`` a close key is expected to share (its first half)."""
    return key[: max(1, len(key) // 2)]


def rank(response: Response, jobs: Iterable[KeyedJob]) -> list[Candidate]:
    """The jobs most likely meant by ``response``: close keys first (fewest edits, then
    newest), then in-flight jobs of the response's type."""
    by_key: list[tuple[int, int, KeyedJob]] = []
    of_type: list[KeyedJob] = []
    seen: set[int] = set()
    limit = close_enough(response.correlation_key)
    for job in jobs:
        if job.id in seen:
            continue
        seen.add(job.id)
        if job.correlation_key is not None:
            d = edit_distance(response.correlation_key, job.correlation_key)
            if d <= limit:
                by_key.append((d, -job.id, job))
                continue
        if response.job_type is not None and job.type == response.job_type:
            of_type.append(job)
    by_key.sort(key=lambda x: (x[0], x[1]))
    out = [Candidate(j, f"key {d} edit{'s' if d != 1 else ''} away") for d, _, j in by_key] + [
        Candidate(j, f"{j.state}, of type {j.type}") for j in sorted(of_type, key=lambda j: -j.id)
    ]
    return out[:SUGGESTED]


async def suggest(service: Service, unknown: Sequence[Response]) -> dict[int, list[Candidate]]:
    """Candidates for each response whose key no open job holds: response id -> jobs."""
    if not unknown:
        return {}
    store = service.store
    sample = await store.job_in_flight_sample()
    out: dict[int, list[Candidate]] = {}
    for response in unknown:
        prefix = prefix_of(response.correlation_key)
        beside = [
            j
            for j in await store.job_keys_from(prefix)
            if j.correlation_key is not None and j.correlation_key.startswith(prefix)
        ]
        found = rank(response, [*beside, *sample])
        if found:
            out[response.id] = found
    return out
