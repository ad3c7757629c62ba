"""What a loop does with the jobs the database says it owns after a failed tick, and
what a draining loop leaves alone."""

from __future__ import annotations

from datetime import timedelta

from hipq.batch_loop.recovery import RECOVERY_BACKOFF, Drain, reconcile
from hipq.lifecycle import State
from tests.factories import NOW, make_job


def test_a_lost_commit_reply_is_taken_from_the_database() -> None:
    kept = make_job(id=1)
    settled = make_job(id=2)  # the failed tick's commit settled it
    retried = make_job(id=3, attempt=1)
    known = {1: kept, 2: settled, 3: retried}
    claimed = make_job(id=4)  # the failed tick's commit claimed it
    again = make_job(id=3, attempt=2)  # settled for a retry and claimed again
    waiting = make_job(id=5, state=State.AWAITING)  # its request already went out
    owned = {1: kept, 3: again, 4: claimed, 5: waiting}

    now = reconcile(known, owned)

    assert now.in_flight == owned
    assert now.forgotten == [settled]
    assert sorted(j.id for j in now.to_dispatch) == [3, 4]


def test_nothing_changes_when_memory_and_database_agree() -> None:
    jobs = {1: make_job(id=1), 2: make_job(id=2, state=State.AWAITING)}
    now = reconcile(jobs, dict(jobs))
    assert (now.in_flight, now.forgotten, now.to_dispatch) == (jobs, [], [])


def test_a_draining_loop_claims_nothing_and_is_not_woken_by_due_jobs() -> None:
    drain = Drain()
    due = NOW + timedelta(seconds=5)
    assert drain.claims and drain.wake_at(due) == due
    drain.requested = True
    assert not drain.claims and drain.wake_at(due) is None


def test_the_wait_before_a_reread_doubles_up_to_thirty_seconds() -> None:
    assert [RECOVERY_BACKOFF.delay(n) for n in (0, 1, 2, 3, 6, 20)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        30.0,
        30.0,
    ]
