"""Lifecycle log lines, fed by the core's events: one line per event that matters,
with the job's id, queue, type, attempt and reason, and never its payload."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

import pytest

from hipq.batch_loop.admission import Admission
from hipq.jobs import Job
from hipq.observability.lifecycle_log import FIELDS_ATTR, ConsoleFormatter, JsonFormatter, describe
from hipq.service import Service
from hipq.throttling import RunningView, Stage, Verdict
from tests.support import FakeClock, make_settings

SECRET = "card-4111-SECRET"

JOB_TYPES = {
    "hang": {
        "transport": {"python": {"handler": "tests.handlers:hang"}},
        "timeout": "30s",
        "retry": {"strategy": "fixed", "delay": "10s", "max_attempts": 2},
    },
}


@pytest.fixture
async def service(database_url: str) -> AsyncIterator[Service]:
    clock = FakeClock()
    svc = Service(
        make_settings(database_url, job_types=JOB_TYPES), clock=clock, owner="a", run_loops=False
    )
    await svc.start()
    yield svc
    await svc.stop()


@pytest.fixture
def lines(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="hipq.lifecycle")
    return caplog


def lifecycle(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, Any]]]:
    return [
        (r.getMessage(), getattr(r, FIELDS_ATTR))
        for r in caplog.records
        if r.name == "hipq.lifecycle"
    ]


async def add(svc: Service, **fields: Any) -> Job:
    new = svc.intake.resolve(fields, svc.clock())
    [job] = (await svc.store.job_insert_many([new], svc.clock())).jobs
    return job


async def ticks(svc: Service, n: int = 2) -> None:
    for _ in range(n):
        await svc.loops["default"].run_once()
        await asyncio.sleep(0.02)  # the handlers it dispatched report


async def test_a_failing_job_is_logged_retried_then_given_up_without_its_payload(
    service: Service, lines: pytest.LogCaptureFixture
) -> None:
    clock: FakeClock = service.clock  # type: ignore[assignment]
    job = await add(service, type="record", payload={"fail_until": 9, "card": SECRET})
    assert await service.loops["default"].acquire()
    for _ in range(3):
        await ticks(service)
        clock.advance(11)
    events = lifecycle(lines)
    assert events[0] == ("lease_taken", {"queue": "default", "token": 1, "resumed": 0})
    settled = [(name, f) for name, f in events if "job_id" in f]
    assert [(name, f["attempt"]) for name, f in settled] == [
        ("job_retried", 1),
        ("job_retried", 2),
        ("job_given_up", 3),
    ]
    for _name, f in settled:
        assert (f["job_id"], f["queue"], f["type"]) == (job.id, "default", "record")
    assert settled[0][1]["reason"] == "RuntimeError: attempt 1 fails"
    assert settled[0][1]["run_at"] == job.run_at.replace(second=10)  # the fixed 10s delay
    assert settled[2][1]["state"] == "failed"
    assert "max_attempts" in settled[2][1]["reason"] or "attempts" in settled[2][1]["reason"]
    levels = [
        r.levelname for r in lines.records if r.name == "hipq.lifecycle" and "job" in r.getMessage()
    ]
    assert levels == ["WARNING", "WARNING", "ERROR"]
    for formatter in (ConsoleFormatter(), JsonFormatter()):
        text = "\n".join(formatter.format(r) for r in lines.records)
        assert SECRET not in text and "fail_until" not in text


async def test_a_timeout_a_permanent_failure_and_a_cancel_are_logged(
    service: Service, lines: pytest.LogCaptureFixture
) -> None:
    clock: FakeClock = service.clock  # type: ignore[assignment]
    hung = await add(service, type="hang")
    broken = await add(service, type="permanent")
    cancelled = await add(service, type="hang")
    assert await service.loops["default"].acquire()
    await ticks(service, 1)
    await service.store.job_cancel(cancelled.id, clock())  # in flight: a request
    service.loops["default"].hint_cancels()
    clock.advance(31)  # past the hung job's 30s timeout
    await ticks(service, 1)
    by_job = {f["job_id"]: (name, f) for name, f in lifecycle(lines) if "job_id" in f}
    name, f = by_job[hung.id]
    assert name == "job_timed_out"
    assert (f["then"], f["attempt"], f["error_kind"]) == ("retried", 1, "timeout")
    assert f["reason"] == "timed out after 30s"
    name, f = by_job[broken.id]
    assert (name, f["type"], f["reason"]) == (
        "job_failed",
        "permanent",
        "not retryable: PermanentError: will never work",
    )
    name, f = by_job[cancelled.id]
    assert (name, f["state"], f["attempt"]) == ("job_cancelled", "cancelled", 1)


class Raising:
    def decide(self, candidates: Sequence[Job], view: RunningView, now: datetime) -> Verdict:
        raise RuntimeError("plugin bug")


async def test_a_throttler_fault_is_logged_with_its_queue_and_reason(
    service: Service, lines: pytest.LogCaptureFixture
) -> None:
    loop = service.loops["default"]
    loop.admission.chain.close()
    loop.admission = Admission("default", loop.config, [Stage("plugin", Raising())], loop.events)  # type: ignore[arg-type]
    await add(service, type="ok")
    assert await loop.acquire()
    await loop.run_once()
    [f] = [f for n, f in lifecycle(lines) if n == "throttler_fault"]
    assert f["queue"] == "default" and f["throttler"] == "plugin"
    assert "plugin bug" in f["reason"]
    [record] = [r for r in lines.records if r.getMessage() == "throttler_fault"]
    assert record.levelname == "ERROR"


async def test_lease_lost_and_schedule_fired_are_logged_from_their_events(
    service: Service, lines: pytest.LogCaptureFixture
) -> None:
    # Schedules emit `schedule_fired` through the service's events; the log subscribes
    # to the name.
    service.events.emit("schedule_fired", schedule="nightly", job_id=42, queue="default")
    loop = service.loops["default"]
    assert await loop.acquire()
    await service.store.lease_release("default", "a", loop.token)  # as if taken away
    await service.store.lease_acquire("default", "b", service.clock(), 15)
    await loop.run_once()  # the fence fails: the lease is lost
    events = lifecycle(lines)
    assert ("schedule_fired", {"schedule": "nightly", "job_id": 42, "queue": "default"}) in events
    assert ("lease_lost", {"queue": "default", "token": 1}) in events


def test_parked_and_unknown_responses_become_lines_without_keys_or_values() -> None:
    parked = describe(
        "response_parked",
        {"source": "kafka:orders", "reason": "no key", "partition": 0, "offset": 7},
    )
    assert parked == (
        logging.WARNING,
        "response_parked",
        {"source": "kafka:orders", "reason": "no key", "partition": 0, "offset": 7},
    )
    assert describe("responses_settled", {"status": "expired", "count": 3}) == (
        logging.WARNING,
        "responses_unknown",
        {"count": 3},
    )
    assert describe("responses_settled", {"status": "matched", "count": 3}) is None
    assert describe("jobs_admitted", {"queue": "q", "count": 1}) is None


def test_json_lines_carry_the_fields_and_console_lines_quote_what_needs_it() -> None:
    record = logging.LogRecord("hipq.lifecycle", logging.WARNING, "", 0, "job_retried", (), None)
    fields = {"job_id": 7, "queue": "default", "type": "charge", "attempt": 2, "reason": "HTTP 503"}
    setattr(record, FIELDS_ATTR, fields)
    out = json.loads(JsonFormatter().format(record))
    assert out["event"] == "job_retried" and out["level"] == "warning"
    assert {k: out[k] for k in fields} == fields
    line = ConsoleFormatter().format(record)
    assert line.endswith(
        'hipq.lifecycle: job_retried job_id=7 queue=default type=charge attempt=2 reason="HTTP 503"'
    )


def test_a_traceback_cannot_pass_for_log_lines_of_its_own() -> None:
    """A pull worker sends its traceback's text: each of its lines is marked below the
    event, and characters that end or rewrite a line are shown escaped."""
    record = logging.LogRecord("hipq.lifecycle", logging.WARNING, "", 0, "job_retried", (), None)
    forged = "Traceback (most recent call last):\n2026-11-29 INFO hipq: fake\rline\x1b[2K\u2028x\n"
    setattr(record, FIELDS_ATTR, {"job_id": 7, "traceback": forged})
    first, *rest = ConsoleFormatter().format(record).split("\n")
    assert first.endswith("hipq.lifecycle: job_retried job_id=7")
    assert rest == [
        "  | Traceback (most recent call last):",
        "  | 2026-11-29 INFO hipq: fake\\rline\\x1b[2K\\u2028x",
    ]
