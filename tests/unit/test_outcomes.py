"""settle(): an attempt's outcome turned into one change of its job."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from hipq.jobs import Job
from hipq.lifecycle import (
    InvalidTransition,
    State,
)
from hipq.outcomes import STRATEGY_FAULT_DELAY, Cancelled, Failed, Succeeded, settle
from hipq.retry import (
    AttemptError,
    Fixed,
    FixedSettings,
    RetryAt,
)
from tests.factories import NOW
from tests.factories import numbered_job as job


class Always:
    """A retry plugin that retries everything after a minute, with a new payload."""

    def decide(self, job: Job, error: AttemptError, now: datetime) -> Any:
        job.payload["touched"] = True  # must not leak into the loop's job
        return RetryAt(now + timedelta(minutes=1), {"rewritten": True})


class Returns:
    def __init__(self, decision: Any) -> None:
        self.decision = decision

    def decide(self, job: Job, error: AttemptError, now: datetime) -> Any:
        if isinstance(self.decision, Exception):
            raise self.decision
        return self.decision


FIXED = Fixed(FixedSettings(strategy="fixed", delay=10, max_attempts=3))


def test_settle_success() -> None:
    done = settle(job(), Succeeded({"ok": 1}), FIXED, NOW + timedelta(seconds=3))
    assert (done.state, done.result, done.finished_at, done.last_error) == (
        State.COMPLETED,
        {"ok": 1},
        NOW + timedelta(seconds=3),
        None,
    )
    assert done.record is not None
    assert (done.record.outcome, done.record.attempt) == ("completed", 1)
    assert done.record.started_at == NOW
    assert done.record.response == {"ok": 1}


def test_settle_cancelled() -> None:
    done = settle(job(state=State.AWAITING), Cancelled(), FIXED, NOW)
    assert (done.state, done.finished_at, done.last_error) == (
        State.CANCELLED,
        NOW,
        "cancelled by request",
    )
    assert done.record is not None and done.record.outcome == "cancelled"


def test_settle_failure_retries_through_the_strategy() -> None:
    retried = settle(job(attempt=2), Failed(AttemptError("boom")), FIXED, NOW)
    assert (retried.state, retried.run_at, retried.finished_at, retried.last_error) == (
        State.SCHEDULED,
        NOW + timedelta(seconds=10),
        None,
        "boom",
    )
    assert (retried.attempt, retried.payload) == (2, {"n": 1})
    assert retried.record is not None and retried.record.outcome == "retried"


def test_settle_failure_gives_up() -> None:
    failed = settle(job(attempt=3), Failed(AttemptError("boom")), FIXED, NOW)
    assert (failed.state, failed.finished_at) == (State.FAILED, NOW)
    assert failed.last_error == "gave up after 3 attempts: boom"
    assert failed.record is not None and failed.record.outcome == "failed"


def test_strategy_sees_a_defensive_copy_and_may_change_the_payload() -> None:
    original = job(payload={"n": 1, "nested": {"a": [1]}})
    retried = settle(original, Failed(AttemptError("boom")), Always(), NOW)
    assert retried.payload == {"rewritten": True}
    assert original.payload == {"n": 1, "nested": {"a": [1]}}


def test_non_retryable_error_fails_whatever_the_strategy_says() -> None:
    failed = settle(job(), Failed(AttemptError("will never work", retryable=False)), Always(), NOW)
    assert failed.state == State.FAILED
    assert failed.last_error == "not retryable: will never work"


@pytest.mark.parametrize(
    "answer",
    [
        RuntimeError("plugin bug"),
        None,
        "later",
        RetryAt(datetime(2026, 1, 5, 13, 0)),
        RetryAt(NOW, payload=["not", "an", "object"]),
        RetryAt(NOW, payload={"x": {1, 2}}),
    ],
    ids=["raises", "none", "string", "naive-datetime", "list-payload", "unserialisable-payload"],
)
def test_faulty_strategy_retries_later_instead_of_breaking_the_tick(answer: Any) -> None:
    retried = settle(job(), Failed(AttemptError("boom")), Returns(answer), NOW)
    assert (retried.state, retried.run_at, retried.payload) == (
        State.SCHEDULED,
        NOW + STRATEGY_FAULT_DELAY,
        {"n": 1},
    )
    assert retried.last_error is not None
    assert retried.last_error.startswith("boom (retry strategy failed: ")


def test_faulty_strategy_still_respects_retry_after() -> None:
    later = NOW + timedelta(hours=1)
    retried = settle(
        job(), Failed(AttemptError("429", retry_after=later)), Returns(RuntimeError("bug")), NOW
    )
    assert retried.run_at == later


def test_settle_refuses_a_job_that_is_not_in_flight() -> None:
    with pytest.raises(InvalidTransition):
        settle(job(state=State.SCHEDULED), Succeeded(), FIXED, NOW)
    with pytest.raises(InvalidTransition):
        settle(job(state=State.COMPLETED), Succeeded(), FIXED, NOW)


def test_defensive_copy_is_deep() -> None:
    def fields() -> dict[str, Any]:  # fresh objects each call
        return dict(
            payload={"a": {"b": [1]}},
            labels={"r": "east"},
            windows=[{"start": "05:00", "end": "06:00"}],
            retry={"strategy": "fixed"},
        )

    original = job(**fields())
    copy = original.defensive_copy()
    copy.payload["a"]["b"].append(2)
    copy.labels["r"] = "west"
    assert copy.windows is not None
    copy.windows[0]["start"] = "00:00"
    copy.retry["strategy"] = "none"
    assert original == job(**fields())
