"""What a python handler reads of its job (``JobContext``) is declared once, by its
fields, and copied from the job's fields of the same names; a pull worker's job fills
every one of them from the job it fetched. A field added to the context that the job or
the fetched job lacks, or that the pull worker leaves out, fails here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hipq.client.models import FetchedJob
from hipq.jobs import Job
from hipq.pull.worker import _job as pull_worker_job
from hipq.transports.python import JobContext
from tests.factories import make_job

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class _Reports:
    def __init__(self) -> None:
        self.deadlines: list[datetime] = []

    def heartbeat(self, job: Job, deadline: datetime) -> None:
        self.deadlines.append(deadline)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a context that was only read reported {name}")


def _context(job: Job) -> tuple[JobContext, _Reports]:
    reports = _Reports()
    return JobContext(job, reports, lambda: NOW), reports  # type: ignore[arg-type]


def test_a_context_has_each_of_its_fields_from_the_job() -> None:
    job = make_job(
        id=9, type="mail", queue="east", attempt=2, weight=3, critical=True,
        labels={"region": "east"}, payload={"n": 1},
    )  # fmt: skip
    context, _ = _context(job)
    fields = list(JobContext.__annotations__)
    assert set(fields) <= set(Job._fields)
    assert {name: getattr(context, name) for name in fields} == {
        name: getattr(job, name) for name in fields
    }
    assert context.labels is not job.labels  # the handler's own copies
    assert context.payload == job.payload and context.payload is not job.payload


def test_a_pull_workers_job_fills_every_field_a_context_reads() -> None:
    fetched = FetchedJob(
        id=9, type="mail", queue="east", attempt=2, token="t", payload={"n": 1},
        labels={"region": "east"}, priority=5, weight=3, critical=True, timeout=45.0,
        heartbeat_timeout=None, deadline=NOW + timedelta(minutes=1),
    )  # fmt: skip
    context, reports = _context(pull_worker_job(fetched, NOW))
    for name in JobContext.__annotations__:
        assert getattr(context, name) == getattr(fetched, name), name
    assert context.payload == fetched.payload
    context.heartbeat()  # extends by the job's timeout, as the server's job would
    assert reports.deadlines == [NOW + timedelta(seconds=45)]
