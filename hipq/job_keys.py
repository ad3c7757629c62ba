"""What adding a job with a ``job_key`` does to the jobs of that key: one pure decision.

Every path that adds jobs applies it: the store (the API, the CLI, the client,
schedules, an embedded service) and ``hipq.transactional`` on SQLite; the SQL functions
of transactional enqueue on PostgreSQL repeat it in PL/pgSQL (alembic 0023,
``hipq_key_action``). docs/job-keys.md is the table of it, and where it differs from
graphile-worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from hipq.lifecycle import OPEN, State

__all__ = ["JOB_KEY_MODES", "KeyAction", "holder_states", "key_action", "replacing"]

JOB_KEY_MODES = ("replace", "preserve_run_at", "unsafe_dedupe")

# The holder's columns a replacement keeps: its key, its queue (whose loop owns it), its
# batch (a batch counts the jobs that joined it) and its owner (a key is found within
# its owner only: a replace never moves a job to another).
KEPT_ON_REPLACE = frozenset({"job_key", "queue", "batch_id", "tenant"})


class KeyAction(StrEnum):
    INSERT = "insert"  # no job holds the key: the new job takes it
    RETURN = "return"  # the holder (or the period's first job) is the answer, unchanged
    REPLACE = "replace"  # the scheduled holder takes the new job's fields, keeping its id
    REPLACE_KEEP_RUN_AT = "replace_keep_run_at"  # the same, but its run_at stands
    # The holder in flight lets go of the key and is not retried after its attempt; the
    # new job takes the key (as graphile-worker).
    TAKE_OVER = "take_over"


def holder_states(mode: str) -> frozenset[State]:
    """The states of a job that holds its key for ``mode``: an open job; for
    ``unsafe_dedupe`` also one that failed for good (graphile-worker's failed jobs keep
    their key)."""
    return OPEN | {State.FAILED} if mode == "unsafe_dedupe" else OPEN


def key_action(mode: str, holder: tuple[State, int] | None, in_period: bool = False) -> KeyAction:
    """What a new job with ``mode`` does, given the job holding its key (its state and
    attempt; None when none does) and whether a job of the key was created within the
    new job's ``unique_for`` period (that job is then returned, whatever its state)."""
    if in_period:
        return KeyAction.RETURN
    if holder is None or holder[0] not in holder_states(mode):
        return KeyAction.INSERT
    state, attempt = holder
    if mode == "unsafe_dedupe":
        return KeyAction.RETURN
    if state is not State.SCHEDULED:
        return KeyAction.TAKE_OVER
    # A retry's back-off is not a run time to preserve: only before the first attempt.
    if mode == "preserve_run_at" and attempt == 0:
        return KeyAction.REPLACE_KEEP_RUN_AT
    return KeyAction.REPLACE


def replacing(new: Mapping[str, Any], action: KeyAction, now: datetime) -> dict[str, Any]:
    """The columns a replacement writes over the scheduled holder, from ``new`` (the new
    job's columns): all but its key and queue, ``run_at`` unless kept. As graphile-worker,
    the job no longer carries the error of an attempt made before the replacement; unlike
    it, ``attempt`` is kept: it numbers the job's attempt history, which hipq keeps."""
    changes = {k: v for k, v in new.items() if k not in KEPT_ON_REPLACE}
    if action is KeyAction.REPLACE_KEEP_RUN_AT:
        changes.pop("run_at", None)
    changes.update(updated_at=now, waiting_reason=None, last_error=None)
    return changes
