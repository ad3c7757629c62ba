"""The client's pull-worker calls against a real `hipq serve`, on each engine."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hipq.client import Client, Conflict, InvalidRequest
from tests.client.conftest import JOB_TYPES_WITH_RETRY
from tests.e2e.conftest import write_config
from tests.test_cli import Server, serving

PULLED = {"pulled": {"transport": "pull", "retry": {"strategy": "fixed", "delay": "1h"}}}


@pytest.fixture(scope="module")
def server(engine_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """This module's own server: a pull type makes responses matter, which the shared
    server's tests assume they do not."""
    tmp = tmp_path_factory.mktemp("pull")
    config = write_config(
        tmp / "hipq.yaml",
        engine_url,
        job_types={**JOB_TYPES_WITH_RETRY, **PULLED},
        queues={"default": {"concurrency": 20, "batch_interval": "100ms"}},
    )
    with serving(config, tmp / "serve.log") as running:
        yield running


def test_fetch_and_report(server: Server) -> None:
    with Client(server.url) as hipq:
        job = hipq.add_job("pulled", {"n": 1})
        [fetched] = hipq.fetch_jobs(["pulled"], count=5, wait=30)
        assert (fetched.id, fetched.payload, fetched.attempt) == (job.id, {"n": 1}, 1)
        beat = hipq.report_heartbeat(fetched.id, fetched.token, {"done": 1}, extend_by=600)
        assert beat.attempt == 1
        hipq.report_checkpoint(fetched.id, fetched.token, {"n": 2})
        hipq.report_complete(fetched.id, fetched.token, {"ok": True})
        done = hipq.wait(job.id, timeout=60)
        assert (done.state, done.result) == ("completed", {"ok": True})
        with pytest.raises(Conflict):
            hipq.report_complete(fetched.id, fetched.token, "again")


def test_failure_and_snooze(server: Server) -> None:
    with Client(server.url) as hipq:
        failing = hipq.add_job("pulled")
        [fetched] = hipq.fetch_jobs(["pulled"], wait=30)
        hipq.report_failure(fetched.id, fetched.token, "bad input", retryable=False)
        failed = hipq.wait(failing.id, timeout=60)
        assert failed.state == "failed"
        assert failed.last_error is not None and "bad input" in failed.last_error

        later = hipq.add_job("pulled")
        [fetched] = hipq.fetch_jobs(["pulled"], wait=30)
        hipq.report_snooze(fetched.id, fetched.token, 3600, "not yet")
        for _ in range(600):
            shown = hipq.get_job(later.id)
            if shown.state == "scheduled":
                break
            time.sleep(0.05)
        assert shown.state == "scheduled"
        assert shown.attempt == 0


def test_a_fetch_of_a_type_that_is_not_pulled_is_refused(server: Server) -> None:
    with Client(server.url) as hipq, pytest.raises(InvalidRequest) as refused:
        hipq.fetch_jobs(["echo"])
    assert refused.value.field == "types[0]"


def test_many_outcomes_in_one_call(server: Server) -> None:
    with Client(server.url) as hipq:
        jobs = [hipq.add_job("pulled", {"n": i}) for i in range(2)]
        fetched: list = []
        for _ in range(60):
            fetched += hipq.fetch_jobs(["pulled"], count=2 - len(fetched), wait=30)
            if len(fetched) == 2:
                break
        one, two = sorted(fetched, key=lambda f: f.id)
        results = hipq.report_outcomes(
            [
                {"id": one.id, "token": one.token, "outcome": "completed", "result": {"n": 0}},
                {"id": two.id, "token": two.token, "outcome": "failed", "error": "no",
                 "retryable": False},
                {"id": two.id, "token": two.token, "outcome": "completed"},
            ]
        )  # fmt: skip
        assert [r.status for r in results] == ["accepted", "accepted", "conflict"]
        assert results[2].field == "token"
        done, failed = (hipq.wait(j.id, timeout=60) for j in jobs)
        assert (done.state, done.result) == ("completed", {"n": 0})
        assert failed.state == "failed"
