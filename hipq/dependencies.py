"""Jobs that wait for jobs: the rules of ``after`` that need no database.

A job names the jobs it runs after by id, or by job key (a job of the same request
first, else the newest job holding that key). It stays ``scheduled`` until every one
has finished; its run_at is parked at ``AFTER_PARKED`` meanwhile, so that the due
scan never reaches it, and its own run_at waits in ``after_run_at``. A trigger
(alembic 0022) counts the prerequisites down as they finish and releases or cancels
the job in the transaction that finished the last one, whichever process made it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from graphlib import CycleError, TopologicalSorter

from hipq.jobs import NewJob

AFTER_FAILED = ("cancel", "run")
MAX_AFTER = 100
# Later than any run_at a client may give (run_in is at most 3650 days).
AFTER_PARKED = datetime(9999, 12, 31, tzinfo=UTC)


class DependencyError(ValueError):
    """A request's ``after`` that cannot be: ``index`` is the job's place in it."""

    def __init__(self, index: int, field: str, message: str) -> None:
        super().__init__(message)
        self.index, self.field, self.message = index, field, message


def job_field(index: int, count: int, field: str) -> str:
    """The API's name of a job's field: ``jobs[i].`` in a batch of several."""
    return f"jobs[{index}].{field}" if count > 1 else field


def in_request(new_jobs: Sequence[NewJob]) -> tuple[list[int], list[dict[int, int]]]:
    """The order to insert a request's jobs in (each after those it runs after), and
    per job its ``after`` entries that name a job of the same request (position in
    ``after`` -> that job's index). Raises ``DependencyError`` for a cycle, naming it."""
    keys = {j.job_key: i for i, j in enumerate(new_jobs) if j.job_key}
    inner: list[dict[int, int]] = []
    graph: dict[int, set[int]] = {}
    for i, job in enumerate(new_jobs):
        refs = enumerate(job.after or ())
        found = {k: keys[ref] for k, ref in refs if isinstance(ref, str) and ref in keys}
        inner.append(found)
        graph[i] = set(found.values())
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        cycle: list[int] = exc.args[1]
        names = " -> ".join(_name(new_jobs[i], i) for i in reversed(cycle))
        first = cycle[0]
        raise DependencyError(
            first, job_field(first, len(new_jobs), "after"), f"a cycle: {names}"
        ) from None
    return order, inner


def _name(job: NewJob, index: int) -> str:
    return f"jobs[{index}] ({job.job_key})"


def waiting_reason(ids: Sequence[int], after_failed: str) -> str:
    listed = ", ".join(str(i) for i in ids[:20]) + (", ..." if len(ids) > 20 else "")
    return f"waiting for jobs {listed} to finish (if one fails: {after_failed})"
