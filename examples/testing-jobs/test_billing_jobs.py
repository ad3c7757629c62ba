"""The application's tests of its jobs: add jobs, run what is due, assert on outcomes."""

from __future__ import annotations

from conftest import FakeMailer

from hipq.lifecycle import State
from hipq.service import Service
from hipq.testing import FakeClock, run_until_idle


async def test_an_invoice_is_mailed(hipq: Service, mailer: FakeMailer) -> None:
    job = await hipq.add_job(
        "send_invoice", {"email": "ada@example.com", "lines": [{"amount": 40.0}, {"amount": 2.5}]}
    )
    await run_until_idle(hipq)
    done = await hipq.get_job(job.id)
    assert done.state is State.COMPLETED
    assert done.result == {"total": 42.5}
    assert mailer.sent == [("ada@example.com", "Your invoice: 42.50 EUR")]


async def test_an_empty_invoice_fails_without_a_retry(hipq: Service, mailer: FakeMailer) -> None:
    job = await hipq.add_job("send_invoice", {"email": "ada@example.com"})
    await run_until_idle(hipq)
    done = await hipq.get_job(job.id)
    assert (done.state, done.attempt) == (State.FAILED, 1)
    assert done.last_error == "not retryable: PermanentError: an invoice needs at least one line"
    assert mailer.sent == []


async def test_a_mail_outage_is_retried_five_minutes_later(
    hipq: Service, mailer: FakeMailer, clock: FakeClock
) -> None:
    mailer.down_for = 1
    job = await hipq.add_job(
        "send_invoice", {"email": "ada@example.com", "lines": [{"amount": 10.0}]}
    )
    await run_until_idle(hipq)
    assert (await hipq.get_job(job.id)).state is State.SCHEDULED  # its retry waits
    clock.advance(299)
    await run_until_idle(hipq)
    assert mailer.sent == []
    clock.advance(1)
    await run_until_idle(hipq)
    done = await hipq.get_job(job.id)
    assert (done.state, done.attempt) == (State.COMPLETED, 2)
    assert len(mailer.sent) == 1


async def test_the_nightly_report_runs_at_two(hipq: Service, clock: FakeClock) -> None:
    await run_until_idle(hipq)  # 01:30
    assert await hipq.list_jobs(type="nightly_report") == []
    clock.advance(30 * 60)  # 02:00
    report = await run_until_idle(hipq)
    assert report.scheduled == 1
    [job] = await hipq.list_jobs(type="nightly_report")
    assert (job.state, job.result) == (State.COMPLETED, {"day": "2026-03-02"})
