"""The adaptive throttler's decisions, pure: built through the plugin loader, fed
answers as the loop feeds them, judged with a clock the test moves."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest

from hipq.jobs import Job, Start
from hipq.outcomes import Failed
from hipq.plugins import THROTTLERS, PluginError, build
from hipq.retry import AttemptError
from hipq.throttling import RunningView, Stage, feed_back
from tests.factories import NOW, make_job


def adaptive(**settings: Any) -> Stage:
    return Stage.of("adaptive", build(THROTTLERS, "adaptive", settings))


def candidates(n: int, at: datetime, **labels: str) -> list[Job]:
    return [make_job(id=i, labels=labels, claimed_at=at) for i in range(1, n + 1)]


def admitted(stage: Stage, n: int, now: datetime, starts: list[Start] | None = None) -> int:
    view = RunningView((), starts or [])
    return len(stage.throttler.decide(candidates(n, now), view, now).admitted)


def answer(stage: Stage, now: datetime, status: int | None, claimed: datetime, **kw: Any) -> None:
    job = make_job(claimed_at=claimed, labels=kw.pop("labels", {}))
    outcome = None
    if status is not None:
        error = AttemptError(f"HTTP {status}", kind="http", **kw)
        outcome = Failed(error, response={"status": status, "body": None})
    feed_back([stage], job, outcome, lambda: now)


def rate(stage: Stage, key: str = "*") -> float:
    assert stage.state is not None
    return float(stage.state()[key]["rate"])


def test_it_admits_its_rate_per_window_paced_in_quarters() -> None:
    stage = adaptive(initial=8, per="1s")
    assert admitted(stage, 20, NOW) == 2  # a quarter of the rate at once
    earlier = [Start(at=NOW - timedelta(milliseconds=ms), labels={}) for ms in (900, 700, 500)]
    assert admitted(stage, 20, NOW, earlier * 2) == 2  # 6 of 8 in the window
    assert admitted(stage, 20, NOW, earlier * 2 + earlier[:1]) == 1
    recent = [Start(at=NOW - timedelta(milliseconds=100), labels={})] * 2
    assert admitted(stage, 20, NOW, recent) == 0  # this quarter's share is taken


def test_overload_halves_the_rate_once_per_burst() -> None:
    stage = adaptive(initial=16, per="1s", decrease=0.5)
    admitted(stage, 20, NOW)
    later = NOW + timedelta(milliseconds=100)
    for _ in range(10):  # ten 429s to jobs of the same burst
        answer(stage, later, 429, claimed=NOW)
    assert rate(stage) == 8
    # A job claimed after the decrease that is refused again: a new burst, halved again.
    answer(stage, later + timedelta(seconds=1), 503, claimed=later + timedelta(milliseconds=1))
    assert rate(stage) == 4
    assert stage.state is not None and stage.state()["*"]["overloads"] == 11


def test_good_answers_raise_it_step_by_step_while_it_is_the_limit() -> None:
    stage = adaptive(initial=4, per="1s", increase=2, max=9)
    now = NOW
    seen = []
    for _ in range(6):
        admitted(stage, 10, now)  # more due than the rate: it is the limit
        now += timedelta(seconds=1)
        answer(stage, now, None, claimed=now - timedelta(milliseconds=10))
        seen.append(rate(stage))
    assert seen == [6, 8, 9, 9, 9, 9]


def test_it_does_not_grow_when_the_rate_is_not_reached() -> None:
    stage = adaptive(initial=4, per="1s")
    now = NOW
    for _ in range(5):
        assert admitted(stage, 1, now) == 1  # fewer due than the rate
        now += timedelta(seconds=1)
        answer(stage, now, None, claimed=now)
    assert rate(stage) == 4


def test_it_never_falls_below_min() -> None:
    stage = adaptive(initial=4, per="1s", min=3, decrease=0.5)
    now = NOW
    for _ in range(4):
        now += timedelta(seconds=1)
        answer(stage, now, 429, claimed=now)
    assert rate(stage) == 3


def test_retry_after_stops_every_start_until_then() -> None:
    stage = adaptive(initial=10, per="1s")
    until = NOW + timedelta(seconds=30)
    answer(stage, NOW, 429, claimed=NOW, retry_after=until)
    soon = NOW + timedelta(seconds=5)
    verdict = stage.throttler.decide(candidates(3, NOW), RunningView(()), soon)
    assert verdict.admitted == []
    assert set(verdict.held.values()) == {"adaptive paused until 12:00:30 (Retry-After)"}
    # Then at the decreased rate (7): its first quarter, 2.
    assert admitted(stage, 3, until + timedelta(milliseconds=1)) == 2


def test_slow_answers_count_as_overload() -> None:
    stage = adaptive(initial=10, per="1s", latency="2s")
    answer(stage, NOW + timedelta(seconds=3), None, claimed=NOW)  # took 3 s
    assert rate(stage) == 7  # the default decrease: 0.7
    answer(stage, NOW + timedelta(seconds=5), None, claimed=NOW + timedelta(seconds=4))
    assert rate(stage) == 7  # a fast one does not decrease it


def test_other_errors_say_nothing_about_capacity() -> None:
    stage = adaptive(initial=10, per="1s")
    admitted(stage, 20, NOW)
    answer(stage, NOW + timedelta(seconds=2), 500, claimed=NOW)
    assert rate(stage) == 10


def test_each_label_value_has_its_own_rate() -> None:
    stage = adaptive(initial=16, per="1s", label="tenant", decrease=0.5)
    answer(stage, NOW, 429, claimed=NOW, labels={"tenant": "a"})
    jobs = [make_job(id=i, labels={"tenant": "a" if i <= 10 else "b"}) for i in range(1, 21)]
    verdict = stage.throttler.decide(jobs, RunningView(()), NOW)
    assert len([i for i in verdict.admitted if i <= 10]) == 2  # a quarter of 8
    assert len([i for i in verdict.admitted if i > 10]) == 4  # a quarter of 16
    assert verdict.held[10] == "adaptive tenant=a 8 per 1s reached"
    assert stage.state is not None and set(stage.state()) == {"a", "b"}


def test_a_faulty_feedback_taker_does_not_break_the_report() -> None:
    class Broken:
        def decide(self, *args: Any) -> None:
            return None

        def on_feedback(self, feedback: Any) -> None:
            raise RuntimeError("bug")

    answer(Stage.of("broken", Broken()), NOW, 429, claimed=NOW)  # logged, not raised


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "initial: Field required"),
        ({"initial": 5, "min": 10}, "initial must lie between min and max"),
        ({"initial": 1, "min": 1, "max": 0.5}, "max (0.5) is below min (1)"),
        ({"initial": 5, "decrease": 1.5}, "decrease: Input should be less than 1"),
        ({"initial": 5, "per": "0s"}, "per must be longer than 0"),
        ({"initial": 5, "latency": "soon"}, "latency"),
    ],
)
def test_bad_settings_are_refused_with_the_field(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError, match=re.escape(message)):
        build(THROTTLERS, "adaptive", settings)
