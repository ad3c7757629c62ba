"""hipq.client.Client against a real `hipq serve`, on SQLite and PostgreSQL: what an
application does with it, and the errors it gets back."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from hipq.client import (
    Client,
    Conflict,
    InvalidRequest,
    Job,
    JobRef,
    NotFound,
    Queue,
    WaitTimeout,
)
from tests.client.conftest import Server, count_jobs

pytestmark = pytest.mark.e2e


def test_add_wait_get_a_job(server: Server) -> None:
    with Client(server.url) as hipq:
        job = hipq.add_job("ok", {"n": 1}, labels={"case": "add-wait"}, priority=5, timeout="30s")
        assert isinstance(job, Job)
        assert (job.type, job.payload, job.labels, job.priority) == (
            "ok",
            {"n": 1},
            {"case": "add-wait"},
            5,
        )
        assert job.timeout == 30 and job.state == "scheduled"

        done = hipq.wait(job.id, timeout=30)
        assert done.state == "completed" and done.terminal
        assert done.result == {"echo": {"n": 1}}

        shown = hipq.get_job(job.id)
        assert shown.attempts is not None
        assert [a.outcome for a in shown.attempts] == ["completed"]
        assert shown.finished_at is not None and shown.finished_at >= shown.created_at


def test_add_many_then_iterate_every_page(server: Server) -> None:
    with Client(server.url) as hipq:
        future = datetime.now(UTC) + timedelta(hours=1)
        refs = hipq.add_jobs(
            [
                {"type": "ok", "payload": {"i": i}, "run_at": future, "labels": {"case": "pages"}}
                for i in range(230)
            ]
        )
        assert len(refs) == 230 and all(isinstance(r, JobRef) for r in refs)
        assert {r.state for r in refs} == {"scheduled"}

        seen = list(hipq.iter_jobs(labels={"case": "pages"}, page_size=17))
        # Every job once, newest first, over 14 pages.
        assert [j.id for j in seen] == sorted((r.id for r in refs), reverse=True)
        assert sorted(j.payload["i"] for j in seen) == list(range(230))

        first = hipq.list_jobs(labels={"case": "pages"}, limit=100)
        assert len(first.jobs) == 100 and first.next_cursor is not None
        nothing = list(hipq.iter_jobs(labels={"case": "no-such-label"}))
        assert nothing == []


def test_a_retried_add_with_the_same_key_makes_one_job(server: Server) -> None:
    with Client(server.url) as hipq:
        first = hipq.add_job("ok", labels={"case": "same-key"}, idempotency_key="order-17")
        again = hipq.add_job("ok", labels={"case": "same-key"}, idempotency_key="order-17")
        assert again.id == first.id
        other = hipq.add_job("ok", labels={"case": "same-key"})
        assert other.id != first.id
    assert count_jobs(server, label="case:same-key") == 2


def test_cancel_retry_change_and_wait_timeout(server: Server) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    with Client(server.url) as hipq:
        scheduled = hipq.add_job("ok", run_at=later, labels={"case": "verbs"})
        changed = hipq.change_job(scheduled.id, priority=-3, payload={"changed": True})
        assert (changed.priority, changed.payload) == (-3, {"changed": True})
        cancelled = hipq.cancel_job(scheduled.id)
        assert cancelled.state == "cancelled"

        failed = hipq.wait(hipq.add_job("permanent").id, timeout=30)
        assert (
            failed.state == "failed"
            and failed.last_error
            and "will never work" in failed.last_error
        )
        retried = hipq.retry_job(failed.id)
        assert retried.state == "scheduled"
        assert hipq.wait(failed.id, timeout=30).attempt == 2

        hanging = hipq.add_job("hang")
        with pytest.raises(WaitTimeout) as waited:
            hipq.wait(hanging.id, timeout=1.5)
        assert waited.value.job.id == hanging.id
        assert waited.value.job.state in ("scheduled", "running")
        assert isinstance(waited.value, TimeoutError)
        asked = hipq.cancel_job(hanging.id)
        assert asked.cancel_requested
        assert hipq.wait(hanging.id, timeout=30).state == "cancelled"


def test_errors_name_the_field_and_the_problem(server: Server) -> None:
    with Client(server.url) as hipq:
        with pytest.raises(InvalidRequest) as unknown:
            hipq.add_job("nope")
        assert unknown.value.status == 422 and unknown.value.field == "type"
        assert "unknown job type 'nope'" in unknown.value.message

        with pytest.raises(InvalidRequest) as bad_time:
            hipq.add_job("ok", run_at="tomorrow")
        assert bad_time.value.field == "run_at"

        with pytest.raises(InvalidRequest) as in_batch:
            hipq.add_jobs([{"type": "ok"}, {"type": "ok", "priority": "high"}])  # type: ignore[typeddict-item]
        assert in_batch.value.field == "jobs[1].priority"

        with pytest.raises(NotFound) as missing:
            hipq.get_job(987654)
        assert missing.value.status == 404 and "987654" in missing.value.message

        done = hipq.wait(hipq.add_job("ok").id, timeout=30)
        with pytest.raises(Conflict) as finished:
            hipq.cancel_job(done.id)
        assert finished.value.status == 409 and "completed" in finished.value.message

        with pytest.raises(NotFound) as no_queue:
            hipq.pause_queue("nope")
        assert no_queue.value.field == "name"

        with pytest.raises(InvalidRequest) as bad_filter:
            hipq.list_jobs(states=["sleeping"])
        assert bad_filter.value.field is not None and bad_filter.value.field.startswith("state")


def test_queues_pause_and_resume(server: Server) -> None:
    with Client(server.url) as hipq:
        queues = hipq.list_queues()
        assert [q.name for q in queues] == ["default", "other"]
        assert all(isinstance(q, Queue) for q in queues)
        paused = hipq.pause_queue("other")
        assert paused.paused and paused.concurrency == 5
        job = hipq.add_job("ok", queue="other")
        with pytest.raises(WaitTimeout):
            hipq.wait(job.id, timeout=1)  # nothing starts in a paused queue
        assert hipq.get_queue("other").scheduled >= 1
        assert not hipq.resume_queue("other").paused
        assert hipq.wait(job.id, timeout=30).state == "completed"


def test_queue_limits_changed_and_reset(server: Server) -> None:
    with Client(server.url) as hipq:
        changed = hipq.change_limits("other", {"concurrency": 8})
        assert changed.concurrency == 8 and changed.limits is not None
        assert changed.limits["overrides"] == {"concurrency": 8}
        with pytest.raises(InvalidRequest) as refused:
            hipq.change_limits("other", {"concurrency": 0})
        assert refused.value.field == "concurrency"
        assert hipq.reset_limits("other").concurrency == 5


def test_responses_list_and_match(server: Server) -> None:
    with Client(server.url) as hipq:
        # A callback for a key no job has: kept in the inbox as pending.
        answer = httpx.post(
            f"{server.url}/v1/callbacks/client-key-1", json={"status": "ok"}, timeout=10
        )
        assert answer.status_code < 300, answer.text
        pending = list(hipq.iter_responses(key="client-key-1", page_size=1))
        assert [r.status for r in pending] == ["pending"]
        assert pending[0].body == {"status": "ok"}
        assert hipq.get_response(pending[0].id).correlation_key == "client-key-1"
        assert [r.id for r in hipq.list_responses(matched=False, key="client-key-1").responses] == [
            pending[0].id
        ]

        # Every job type here runs a python handler: nothing a response could settle.
        done = hipq.wait(hipq.add_job("ok").id, timeout=30)
        with pytest.raises(Conflict) as refused:
            hipq.match_response(pending[0].id, done.id)
        assert refused.value.status == 409 and refused.value.field == "job_id"
        assert "POST /v1/jobs/{id}/complete" in refused.value.message


def test_operator_verbs_on_one_job_and_by_key(server: Server) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    with Client(server.url) as hipq:
        done = hipq.complete_job(hipq.add_job("ok", run_at=later).id, {"by": "hand"})
        assert (done.state, done.result) == ("completed", {"by": "hand"})
        failed = hipq.fail_job(hipq.add_job("ok", run_at=later).id, "not wanted")
        assert (failed.state, failed.last_error) == ("failed", "not wanted")
        moved = hipq.reschedule_job(failed.id, run_in="2h", priority=7, reset_attempts=True)
        assert (moved.state, moved.priority, moved.attempt) == ("scheduled", 7, 0)
        assert moved.run_at > later

        gone = hipq.delete_job(done.id)
        assert gone.id == done.id
        with pytest.raises(NotFound):
            hipq.get_job(done.id)

        keyed = hipq.add_job("ok", run_at=later, job_key="client-nightly-report")
        assert hipq.get_job_by_key("client-nightly-report").id == keyed.id
        assert hipq.cancel_job_by_key("client-nightly-report").state == "cancelled"
        with pytest.raises(NotFound):
            hipq.get_job_by_key("client-nightly-report")  # no open job holds it now


def test_bulk_operations_and_forbidden_flags(server: Server) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    with Client(server.url) as hipq:
        hipq.add_jobs([{"type": "ok", "run_at": later, "labels": {"case": "bulk"}}] * 6)
        match = {"labels": {"case": "bulk"}, "states": ["scheduled"]}
        assert hipq.bulk_dry_run("cancel", match).matched == 6
        op = hipq.bulk("cancel", match, reason="region down")
        for _ in range(100):
            if op.state != "running":
                break
            time.sleep(0.1)
            op = hipq.get_bulk(op.id)
        assert (op.state, op.matched, op.changed) == ("done", 6, 6)
        assert op.id in [o.id for o in hipq.list_bulk()]
        states = {j.state for j in hipq.iter_jobs(labels={"case": "bulk"})}
        assert states == {"cancelled"}

        assert hipq.set_forbidden_flags("other", ["slow", "eu"]).forbidden_flags == ["eu", "slow"]
        assert hipq.get_queue("other").forbidden_flags == ["eu", "slow"]
        assert hipq.set_forbidden_flags("other", []).forbidden_flags == []


def test_schedules(server: Server) -> None:
    with Client(server.url) as hipq:
        made = hipq.create_schedule(
            "client-nightly", "0 2 * * *", {"type": "ok"}, timezone="Europe/Berlin"
        )
        assert (made.name, made.source, made.paused) == ("client-nightly", "api", False)
        assert made.next_fire_time is not None
        times = hipq.next_fire_times("client-nightly", 3).fire_times
        assert len(times) == 3 and times == sorted(times)
        ran = hipq.run_schedule("client-nightly")
        assert ran.job.type == "ok"
        assert [f.job_id for f in hipq.schedule_fires("client-nightly").fires] == [ran.job.id]
        assert hipq.pause_schedule("client-nightly").next_fire_time is None
        assert not hipq.resume_schedule("client-nightly").paused
        assert hipq.change_schedule("client-nightly", cron="30 3 * * *").cron == "30 3 * * *"
        changed = hipq.change_schedule(
            "client-nightly", overlap="buffer_one", pause_on_failure=True
        )
        assert (changed.overlap, changed.pause_on_failure, changed.paused_reason) == (
            "buffer_one",
            True,
            None,
        )
        assert "client-nightly" in [s.name for s in hipq.list_schedules()]
        hipq.delete_schedule("client-nightly")
        with pytest.raises(NotFound):
            hipq.get_schedule("client-nightly")
        with pytest.raises(InvalidRequest) as bad:
            hipq.create_schedule("client-bad", "every night", {"type": "ok"})
        assert bad.value.field == "cron"
        with pytest.raises(InvalidRequest) as bad:
            hipq.create_schedule("client-bad", "0 2 * * *", {"type": "ok"}, overlap="queue")  # type: ignore[typeddict-item]
        assert bad.value.field == "overlap"
