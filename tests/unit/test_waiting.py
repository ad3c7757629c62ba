"""Why a job waits (``hipq.waiting``), and how the dashboard writes a waiting job's
run time: pure, every cause in one place, the order in which they are told."""

from __future__ import annotations

from datetime import timedelta

from hipq import waiting
from hipq.batches import waiting_reason as batch_reason
from hipq.dashboard.display import in_zone, run_time
from hipq.dependencies import AFTER_PARKED
from hipq.lifecycle import State
from tests.factories import NOW, make_job


def test_each_cause_gives_a_reason_in_order() -> None:
    due = make_job(state=State.SCHEDULED, attempt=0, claimed_at=None)
    later = due._replace(run_at=NOW + timedelta(hours=1))
    full = waiting.queue_full(14, 14)
    assert full == "queue full: concurrency 14/14 in use"
    cases = [
        (due, None, waiting.UNREAD),
        (due._replace(waiting_reason="rate 5 per 1s reached"), None, "rate 5 per 1s reached"),
        (due._replace(waiting_reason="rate 5 per 1s reached"), full, full),
        (due, waiting.PAUSED, "queue paused"),
        (later, waiting.PAUSED, "not before 2026-01-05 13:00:00 UTC"),
        (later._replace(attempt=2), None, "retry 3 not before 2026-01-05 13:00:00 UTC"),
        (
            later._replace(windows=[{"start": "13:00", "end": "14:00"}]),
            None,
            "outside its time windows: not before 2026-01-05 13:00:00 UTC",
        ),
        (
            due._replace(run_at=AFTER_PARKED, waiting_for=1, waiting_reason=batch_reason(7)),
            full,
            "waits for batch 7 to finish",
        ),
        (make_job(), full, None),  # running: it waits for nothing
    ]
    for job, queue_reason, expected in cases:
        assert waiting.why(job, queue_reason, NOW) == expected, job


def test_a_queue_reason_comes_from_its_row() -> None:
    assert waiting.of_queue(True, True, {}) == "queue paused"
    assert waiting.of_queue(False, False, None) == "no process runs its queue"
    assert waiting.of_queue(False, True, {waiting.HOLDS_ALL: "queue full: x"}) == "queue full: x"
    assert waiting.of_queue(False, True, {"held_by": {}}) is None


def test_a_parked_run_time_says_what_it_waits_for() -> None:
    parked = make_job(state=State.SCHEDULED, run_at=AFTER_PARKED, waiting_for=2)
    assert run_time(parked._replace(after=[3, 4])) == "after #3, #4"
    assert run_time(parked._replace(after=[1, 2, 3, 4])) == "after #1, #2, #3, ..."
    assert run_time(parked._replace(waiting_reason=batch_reason(12))) == "after batch 12"
    assert run_time(make_job(state=State.SCHEDULED)) == "2026-01-05 12:00:00 UTC"
    assert in_zone(NOW, "Europe/Berlin") == "2026-01-05 13:00:00 CET"
    assert in_zone(NOW, "Nowhere/Else") == "2026-01-05 12:00:00 UTC"
