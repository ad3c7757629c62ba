"""A job's answer body is derived from ``JobOut``'s fields: every field of the job (its
columns) is answered or left out by name here, and the body is what the model answers.
A column added to the job but not to the answer, or to the answer but not read from the
job, fails here."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import orjson

from hipq.api.answers import json_answer
from hipq.api.models import (
    BESIDE_THE_JOB,
    JOB_READ_FROM,
    AttemptOut,
    HeartbeatOut,
    JobOut,
    job_body,
)
from hipq.jobs import Attempt, Job
from hipq.lifecycle import State
from hipq.store.heartbeats import Heartbeat

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _read_from_the_job() -> set[str]:
    return {JOB_READ_FROM.get(f, f) for f in JobOut.model_fields if f not in BESIDE_THE_JOB}


def test_every_field_of_a_job_is_answered_or_left_out_by_name() -> None:
    # run_at and after_run_at are answered as own_run_at (the run_at it was given, while
    # it waits for the jobs it runs after); the trace context stays inside hipq.
    left_out = {"run_at", "after_run_at", "trace_context"}
    assert set(Job._fields) - _read_from_the_job() == left_out
    assert _read_from_the_job() - set(Job._fields) == {"own_run_at"}
    assert list(JobOut.model_fields)[-len(BESIDE_THE_JOB) :] == list(BESIDE_THE_JOB)


def test_every_field_of_an_attempt_and_a_heartbeat_is_answered_or_left_out() -> None:
    attempt = {f.name for f in dataclasses.fields(Attempt)}
    assert attempt - set(AttemptOut.model_fields) == {"job_id"}
    assert set(AttemptOut.model_fields) <= attempt
    beat = {f.name for f in dataclasses.fields(Heartbeat)}
    assert beat - set(HeartbeatOut.model_fields) == {"job_id", "queue", "checkpoint", "beat_at"}
    assert set(HeartbeatOut.model_fields) - beat == {"at"}


def _waiting_job() -> Job:
    return Job(
        id=7,
        type="order",
        queue="east",
        state=State.SCHEDULED,
        payload={"n": 1},
        run_at=NOW + timedelta(days=365),  # parked while it waits
        priority=5,
        weight=2,
        labels={"region": "east"},
        windows=[{"start": "05:00", "end": "07:00"}],
        timeout_seconds=30,
        retry={"strategy": "fixed"},
        attempt=1,
        created_at=NOW,
        updated_at=NOW,
        critical=1,  # type: ignore[arg-type]  # as SQLite reads a boolean
        correlation_key="c-7",
        job_key="k-7",
        last_error="boom",
        waiting_reason="after: 1 of 1 jobs not finished",
        cancel_requested=0,  # type: ignore[arg-type]
        trace_context="00-trace",
        flags=["slow"],
        notify=["ops"],
        after=[3],
        after_failed="run",
        waiting_for=1,
        after_run_at=NOW + timedelta(minutes=5),
        batch_id=2,
    )


def test_the_body_is_what_the_model_answers_in_its_order() -> None:
    job = _waiting_job()
    attempt = Attempt(7, 1, NOW, NOW, "retried", "boom", {"x": 1}, "Traceback ...")
    beat = Heartbeat(7, "east", 1, NOW, NOW + timedelta(minutes=1), {"done": 3})
    body = job_body(job, [attempt], beat)
    assert list(body) == list(JobOut.model_fields)
    # The routes write the body as it is: byte for byte what pydantic writes for JobOut.
    assert json_answer(body).body == JobOut.model_validate(body).model_dump_json().encode()
    served = orjson.loads(json_answer(body).body)
    assert served["run_at"] == "2026-03-01T12:05:00Z"  # as given, not the parked one
    assert served["timeout"] == 30.0 and served["state"] == "scheduled"
    assert body["critical"] is True and body["cancel_requested"] is False
    assert served["attempts"] == [
        {
            "attempt": 1,
            "started_at": "2026-03-01T12:00:00Z",
            "finished_at": "2026-03-01T12:00:00Z",
            "outcome": "retried",
            "error": "boom",
            "response": {"x": 1},
            "traceback": "Traceback ...",
        }
    ]
    assert served["heartbeat"] == {
        "at": "2026-03-01T12:00:00Z",
        "attempt": 1,
        "deadline": "2026-03-01T12:01:00Z",
        "progress": {"done": 3},
    }
    assert job_body(job)["attempts"] is None and job_body(job)["heartbeat"] is None
