"""What an operator does in the dashboard, clicked in a real browser against a real
`hipq serve`: retry failed jobs from the failed page, see why a job is held, match
an unknown callback by hand, pause and resume a queue; and nothing is loaded from
anywhere but hipq itself (the ``page`` fixture fails a test that tries)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from hipq.version import __version__
from tests.dashboard.conftest import Dashboard
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.e2e


def test_failed_jobs_are_grouped_by_error_and_retried_from_the_failed_page(
    dashboard: Dashboard, page: Any
) -> None:
    (dashboard.flags / "fail").touch()
    ids = [dashboard.post_job(type="flaky", payload={"n": n}) for n in range(3)]
    for job_id in ids:
        dashboard.wait_state(job_id, "failed")

    page.goto(f"{dashboard.url}/dashboard/failed")
    group = page.locator("section.error-group").filter(has_text="upstream refused")
    expect(group).to_contain_text("3 jobs")
    dashboard.screenshot(page, "failed")

    # Three jobs: the browser asks first; saying no retries nothing.
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    group.get_by_role("button", name="Retry 3 jobs").click()
    expect(page.locator("#flash")).to_be_hidden()
    assert asked == ["Retry 3 failed jobs with this error?"]
    assert [dashboard.job(i)["state"] for i in ids] == ["failed"] * 3

    (dashboard.flags / "fail").unlink()
    page.once("dialog", lambda d: d.accept())
    group.get_by_role("button", name="Retry 3 jobs").click()
    expect(page.locator("#flash")).to_contain_text("Retry of 3 jobs started (bulk operation ")
    for job_id in ids:
        job = dashboard.wait_state(job_id, "completed")
        assert job["attempt"] == 2
    expect(page.locator("p.empty")).to_have_text("No failed job.")


def test_a_held_job_shows_its_throttlers_reason(dashboard: Dashboard, page: Any) -> None:
    # Some finished attempts in the other queue, for the charts of the screenshot.
    for job_id in [dashboard.post_job(type="flaky") for _ in range(3)]:
        dashboard.wait_state(job_id, "completed")
    (dashboard.flags / "fail").touch()
    dashboard.wait_state(dashboard.post_job(type="flaky"), "failed")
    (dashboard.flags / "fail").unlink()

    first = dashboard.post_job(type="hold", labels={"region": "east"})
    dashboard.wait_state(first, "running")
    held = dashboard.post_job(type="hold", labels={"region": "east"})

    page.goto(f"{dashboard.url}/dashboard")
    queue = page.locator("#queue-regional")
    expect(queue.locator("table.held")).to_contain_text("share")
    expect(queue.locator("ul.reasons")).to_contain_text("region=east")
    shares = queue.locator("table.shares")
    expect(shares.locator("tr", has_text="region=east")).to_contain_text("1")
    expect(queue.locator(".capacity")).to_have_text("1 / 2 in use")
    expect(page.locator("#queue-default")).to_contain_text("4 attempts, 1 failed")
    dashboard.screenshot(page, "overview")

    page.goto(f"{dashboard.url}/dashboard/jobs?queue=regional")
    row = page.locator(f'tr[data-job="{held}"]')
    expect(row).to_contain_text("region=east")
    row.get_by_role("link", name=str(held)).click()
    expect(page.locator("#waiting-reason")).to_contain_text("share region=east")
    reason = page.locator("#waiting-reason").inner_text()
    assert reason == dashboard.job(held)["waiting_reason"]
    dashboard.screenshot(page, "job")

    (dashboard.flags / "release").touch()
    dashboard.wait_state(first, "completed")
    dashboard.wait_state(held, "completed")
    expect(page.locator("#job-state")).to_have_text("completed")


def test_an_unknown_callback_is_matched_by_hand(dashboard: Dashboard, page: Any) -> None:
    job_id = dashboard.post_job(type="charge", payload={"order_id": "A-17"})
    dashboard.wait_state(job_id, "awaiting")
    # The external system answers under a key no job holds (a typo on its side).
    answer = httpx.post(f"{dashboard.url}/v1/callbacks/A-71", json={"status": "ok"})
    assert answer.status_code == 202, answer.text

    page.goto(f"{dashboard.url}/dashboard/responses")
    row = page.locator("tr", has_text="A-71")
    expect(row).to_contain_text("unknown key")
    dashboard.screenshot(page, "responses")
    # The job whose key is two edits away is suggested; the operator picks it.
    suggested = row.locator("ul.candidates li", has_text="A-17")
    expect(suggested).to_contain_text("key 2 edits away")
    page.once("dialog", lambda d: d.accept())
    suggested.get_by_role("button", name=f"job {job_id}", exact=True).click()
    expect(page.locator("#flash")).to_contain_text("matched")

    job = dashboard.wait_state(job_id, "completed")
    assert job["result"] == {"status": "ok"}
    page.goto(f"{dashboard.url}/dashboard/jobs/{job_id}")
    expect(page.locator("#job-state")).to_have_text("completed")
    page.goto(f"{dashboard.url}/dashboard/responses?status=matched")
    expect(page.locator("tr", has_text="A-71")).to_contain_text(f"matched by hand to job {job_id}")


def test_a_queue_is_paused_and_resumed(dashboard: Dashboard, page: Any) -> None:
    page.goto(f"{dashboard.url}/dashboard")
    queue = page.locator("#queue-default")
    queue.get_by_role("button", name="Pause").click()
    expect(page.locator("#flash")).to_have_text("Queue default paused")
    expect(queue.locator(".badge")).to_have_text("paused")
    assert dashboard.server.get("/v1/queues/default")["paused"] is True

    job_id = dashboard.post_job(type="flaky")
    queue.get_by_role("button", name="Resume").click()
    expect(queue.locator(".badge")).to_have_text("admitting")
    assert dashboard.server.get("/v1/queues/default")["paused"] is False
    dashboard.wait_state(job_id, "completed")


def test_a_job_is_failed_by_hand_and_rescheduled(dashboard: Dashboard, page: Any) -> None:
    dashboard.server.post("/v1/queues/default/pause", {})
    job_id = dashboard.post_job(type="flaky")
    page.goto(f"{dashboard.url}/dashboard/jobs/{job_id}")
    expect(page.locator("#job-state")).to_have_text("scheduled")
    page.get_by_label("fail, because").fill("the order was withdrawn")
    page.get_by_role("button", name="Fail").click()
    expect(page.locator("#job-state")).to_have_text("failed")
    expect(page.locator("p.error")).to_have_text("Last error: the order was withdrawn")
    assert dashboard.job(job_id)["last_error"] == "the order was withdrawn"

    page.get_by_role("button", name="Reschedule").click()  # no time given: now
    expect(page.locator("#flash")).to_have_text(f"Job {job_id} rescheduled")
    expect(page.locator("#job-state")).to_have_text("scheduled")
    dashboard.server.post("/v1/queues/default/resume", {})
    dashboard.wait_state(job_id, "completed")
    expect(page.locator("#job-state")).to_have_text("completed")


def test_an_action_the_api_refuses_shows_the_apis_reason(dashboard: Dashboard, page: Any) -> None:
    dashboard.server.post("/v1/queues/default/pause", {})
    job_id = dashboard.post_job(type="flaky")
    page.goto(f"{dashboard.url}/dashboard/jobs/{job_id}")
    page.locator("#live-toggle").uncheck()  # the page still offers Complete...
    dashboard.server.post(f"/v1/jobs/{job_id}/cancel", {})  # ...but someone cancelled it
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Complete").click()
    expect(page.locator("#flash")).to_contain_text("409")
    expect(page.locator("#flash")).to_contain_text(f"job {job_id} is cancelled")
    assert dashboard.job(job_id)["state"] == "cancelled"


def test_the_jobs_page_filters_and_pages(dashboard: Dashboard, page: Any) -> None:
    ids = [dashboard.post_job(type="flaky", labels={"tenant": f"t{n % 2}"}) for n in range(4)]
    for job_id in ids:
        dashboard.wait_state(job_id, "completed")
    page.goto(f"{dashboard.url}/dashboard/jobs")
    page.get_by_label("label").fill("tenant:t1")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("table.jobs tbody tr[data-job]")
    expect(rows).to_have_count(2)
    assert [int(x) for x in rows.evaluate_all("rs => rs.map(r => r.dataset.job)")] == [
        ids[3],
        ids[1],
    ]
    dashboard.screenshot(page, "jobs")

    page.goto(f"{dashboard.url}/dashboard/jobs?since=yesterday")
    expect(page.get_by_role("alert")).to_contain_text("since: 'yesterday' is not a date")


def test_jobs_are_selected_and_retried_and_all_failed_deleted_at_760px(
    dashboard: Dashboard, page: Any
) -> None:
    (dashboard.flags / "fail").touch()
    ids = [dashboard.post_job(type="flaky", payload={"n": n}) for n in range(3)]
    for job_id in ids:
        dashboard.wait_state(job_id, "failed")
    dashboard.server.post("/v1/queues/default/pause", {})  # retried jobs stay scheduled
    page.set_viewport_size({"width": 760, "height": 900})
    page.goto(f"{dashboard.url}/dashboard/jobs?queue=default")
    # Usable at 760 px: nothing scrolls the page sideways.
    assert page.evaluate("document.documentElement.scrollWidth") <= 760

    page.get_by_label(f"select job {ids[0]}", exact=True).check()
    page.get_by_label(f"select job {ids[1]}", exact=True).check()
    expect(page.locator("#selected-count")).to_have_text("2 selected")
    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.get_by_role("button", name="Retry selected").click()
    expect(page.locator("#flash")).to_contain_text("Retry of 2 selected jobs started")
    assert asked == ["Retry 2 selected jobs?"]
    for job_id in ids[:2]:
        expect(page.locator(f'tr[data-job="{job_id}"] .state')).to_have_text("scheduled")
    expect(page.locator(f'tr[data-job="{ids[0]}"] .waiting-reason')).to_have_text("queue paused")
    assert dashboard.job(ids[2])["state"] == "failed"

    page.get_by_label("failed", exact=True).check()
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.jobs tbody tr[data-job]")).to_have_count(1)
    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.get_by_role("button", name="Delete all").click()
    expect(page.locator("#flash")).to_contain_text("Delete of all matching jobs started")
    assert asked[-1].startswith("Delete every job that matches this filter (1 job)?")
    wait_for(
        lambda: httpx.get(f"{dashboard.url}/v1/jobs/{ids[2]}").status_code == 404 or None,
        60,
        f"job {ids[2]} deleted",
    )
    assert [dashboard.job(i)["state"] for i in ids[:2]] == ["scheduled"] * 2


def test_docs_work_offline(dashboard: Dashboard, page: Any) -> None:
    # The page fixture aborts (and fails the test for) any request not to hipq, and
    # fails it for a Content-Security-Policy violation.
    answer = page.goto(f"{dashboard.url}/docs")
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("hipq")
    expect(page.locator(".opblock-summary-path").first).to_be_visible()


def test_a_schedule_is_paused_run_now_and_resumed(dashboard: Dashboard, page: Any) -> None:
    page.goto(f"{dashboard.url}/dashboard/schedules")
    row = page.locator('tr[data-schedule="yearly-report"]')
    expect(row.locator(".next")).to_contain_text("-01-01 02:00:00 UTC")  # 03:00 in Berlin
    row.get_by_role("button", name="Pause").click()
    expect(row.locator(".next")).to_have_text("paused")
    assert dashboard.server.get("/v1/schedules/yearly-report")["paused"] is True

    row.get_by_role("button", name="Run now").click()
    expect(page.locator("#flash")).to_have_text("Schedule yearly-report made a job")
    fire = row.locator("ul.fires li").first
    expect(fire).to_contain_text("run_now")
    job_id = int(fire.get_by_role("link").inner_text().removeprefix("job "))
    dashboard.wait_state(job_id, "completed")
    dashboard.screenshot(page, "schedules")

    row.get_by_role("button", name="Resume").click()
    expect(row.locator(".next")).to_contain_text("-01-01 02:00:00 UTC")
    assert dashboard.server.get("/v1/schedules/yearly-report")["paused"] is False


def test_a_schedule_is_created_and_edited(dashboard: Dashboard, page: Any) -> None:
    page.goto(f"{dashboard.url}/dashboard/schedules")
    page.get_by_text("New schedule").click()
    form = page.locator("#new-schedule")
    form.get_by_label("name").fill("nightly")
    form.get_by_label("cron").fill("0 4 * * *")
    form.get_by_label("time zone").fill("Europe/Berlin")
    form.get_by_label("job type").select_option("flaky")
    form.get_by_label("payload (JSON)").fill('{"report": "daily"}')
    form.get_by_label("while the previous job is open").select_option("queue one behind it")
    form.get_by_label("pause it when its job fails for good").check()
    form.get_by_role("button", name="Create").click()
    expect(page.locator("#flash")).to_have_text("Schedule created")
    row = page.locator('tr[data-schedule="nightly"]')
    expect(row).to_contain_text("0 4 * * *")
    expect(row.locator(".next")).to_contain_text(":00:00 UTC")
    created = dashboard.server.get("/v1/schedules/nightly")
    assert (created["timezone"], created["job"]) == (
        "Europe/Berlin",
        {"type": "flaky", "payload": {"report": "daily"}},
    )
    assert (created["overlap"], created["pause_on_failure"]) == ("buffer_one", True)
    expect(row).to_contain_text("overlap: buffer_one")
    expect(row).to_contain_text("pauses on failure")

    row.get_by_text("Edit").click()
    row.get_by_label("cron").fill("30 5 * * 1-5")
    row.get_by_label("job (JSON)").fill("{bad")
    row.get_by_role("button", name="Save").click()
    expect(page.locator("#flash")).to_contain_text("job: not JSON")
    row.get_by_label("job (JSON)").fill('{"type": "flaky", "priority": 5}')
    row.get_by_label("while the previous job is open").select_option("cancel it")
    box = row.get_by_label("pause it when its job fails for good")
    expect(box).to_be_checked()
    box.uncheck()
    row.get_by_role("button", name="Save").click()
    expect(page.locator("#flash")).to_have_text("Schedule nightly changed")
    expect(row).to_contain_text("30 5 * * 1-5")
    changed = dashboard.server.get("/v1/schedules/nightly")
    assert (changed["cron"], changed["job"]) == ("30 5 * * 1-5", {"type": "flaky", "priority": 5})
    assert (changed["overlap"], changed["pause_on_failure"]) == ("cancel_other", False)
    expect(row).not_to_contain_text("pauses on failure")
    # A schedule of the config file is edited there.
    config_row = page.locator('tr[data-schedule="yearly-report"]')
    expect(config_row).to_contain_text("edit it in the config file")


def test_a_batch_is_followed_page_by_page_and_sealed(dashboard: Dashboard, page: Any) -> None:
    made = dashboard.server.post("/v1/batches", {"on_complete": {"type": "flaky"}})
    batch_id, completion = made["id"], made["completion_job_id"]
    jobs = [{"type": "flaky", "payload": {"n": n}, "batch_id": batch_id} for n in range(51)]
    added = dashboard.server.post("/v1/jobs/batch", {"jobs": jobs})
    ids = [j["id"] for j in added["jobs"]]
    for job_id in ids:
        dashboard.wait_state(job_id, "completed")

    page.goto(f"{dashboard.url}/dashboard")
    page.get_by_role("link", name="Batches").click()
    expect(page).to_have_url(f"{dashboard.url}/dashboard/batches")
    row = page.locator(f'tr[data-batch="{batch_id}"]')
    expect(row.locator(".badge")).to_have_text("open")
    expect(row.locator(".completed")).to_have_text("51")
    row.locator(f'a[href$="/dashboard/batches/{batch_id}"]').click()

    # Open: every job ended, and it waits to be sealed; its jobs, 50 to a page.
    expect(page.locator("#batch-status")).to_have_text("open")
    expect(page.locator("#batch-counts")).to_contain_text("0 pending 51 completed")
    expect(page.locator("table.jobs tbody tr")).to_have_count(50)
    expect(page.locator(f'tr[data-job="{ids[-1]}"] .state')).to_have_text("completed")
    page.get_by_role("link", name="Older →").click()
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.locator(f'tr[data-job="{ids[0]}"]')).to_be_visible()
    dashboard.screenshot(page, "batch")  # the second page: a short picture
    assert dashboard.job(completion)["state"] == "scheduled"

    page.goto(f"{dashboard.url}/dashboard/batches/{batch_id}")
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Seal").click()
    expect(page.locator("#flash")).to_have_text(f"Batch {batch_id} sealed")
    expect(page.locator("#batch-status")).to_have_text("finished")
    assert dashboard.server.get(f"/v1/batches/{batch_id}")["status"] == "finished"
    dashboard.wait_state(completion, "completed")
    page.locator("#completion").get_by_role("link", name=str(completion)).click()
    expect(page.locator("#job-state")).to_have_text("completed")

    # A job's page links to its batch.
    page.goto(f"{dashboard.url}/dashboard/jobs/{ids[0]}")
    page.locator(f'#batch a[href$="/dashboard/batches/{batch_id}"]').click()
    expect(page).to_have_url(f"{dashboard.url}/dashboard/batches/{batch_id}")
    expect(page.get_by_role("link", name="Batches")).to_have_attribute("aria-current", "page")


def test_the_processes_page_shows_each_process_its_queues_and_its_jobs(
    dashboard: Dashboard, page: Any
) -> None:
    running = dashboard.post_job(type="hold", labels={"region": "east"})
    dashboard.wait_state(running, "running")
    pid = dashboard.server.pid

    page.goto(f"{dashboard.url}/dashboard")
    page.get_by_role("link", name="Processes").click()
    expect(page).to_have_url(f"{dashboard.url}/dashboard/processes")
    expect(page.get_by_role("link", name="Processes")).to_have_attribute("aria-current", "page")
    process = page.locator(f"#process-{pid}")
    expect(process.locator(".pid")).to_have_text(str(pid))
    expect(process.locator(".version")).to_have_text(__version__)
    expect(process.locator(".heartbeat")).to_contain_text(" ago")
    expect(process.locator(".serves")).to_have_text("default, regional")
    # The queues it owns now (the registry's first beats may take a moment to show both).
    regional = process.locator('tr[data-queue="regional"]')
    expect(regional.locator(".running")).to_have_text("1", timeout=20_000)
    expect(regional.locator(".awaiting")).to_have_text("0")
    expect(process.locator('tr[data-queue="default"] .running')).to_have_text("0")
    expect(page.locator("#unowned")).to_have_count(0)
    text = process.inner_text()
    api = dashboard.server.get("/v1/processes")["processes"]
    assert [p["pid"] for p in api] == [pid]
    assert api[0]["host"] in text and api[0]["id"] in text
    dashboard.screenshot(page, "processes")

    # Released, the job ends, and the page (live, every 5 s) shows nothing running.
    (dashboard.flags / "release").touch()
    dashboard.wait_state(running, "completed")
    expect(regional.locator(".running")).to_have_text("0", timeout=20_000)


def test_a_full_queue_and_jobs_waiting_for_others_say_why_everywhere(
    dashboard: Dashboard, page: Any
) -> None:
    # Exactly full: one job of each region takes the regional queue's two units.
    busy = [dashboard.post_job(type="hold", labels={"region": r}) for r in ("east", "west")]
    for job_id in busy:
        dashboard.wait_state(job_id, "running")
    waiting = dashboard.post_job(type="hold", labels={"region": "west"})
    after = dashboard.post_job(type="hold", labels={"region": "east"}, after=[busy[0]])
    full = "queue full: concurrency 2/2 in use"
    wait_for(lambda: dashboard.job(waiting)["waiting_reason"] == full, 60, "the full reason")

    page.goto(f"{dashboard.url}/dashboard")
    queue = page.locator("#queue-regional")
    expect(queue.locator(".queue-reason")).to_contain_text(full)
    expect(queue.locator("table.held")).to_contain_text("concurrency")
    expect(queue.locator(".latency")).not_to_have_text("—")

    page.goto(f"{dashboard.url}/dashboard/jobs?queue=regional")
    tab = page.locator('nav.state-tabs a[data-state="scheduled"]')
    expect(tab.locator(".tab-count")).to_have_text("2")
    tab.click()
    expect(tab).to_have_attribute("aria-current", "page")
    row = page.locator(f'tr[data-job="{waiting}"]')
    expect(row.locator(".waiting-reason")).to_have_text(full)
    expect(row.locator(".last-error")).to_have_text("")
    parked = page.locator(f'tr[data-job="{after}"]')
    expect(parked.locator(".run-time")).to_have_text(f"after #{busy[0]}")
    expect(parked.locator(".waiting-reason")).to_contain_text(f"waiting for jobs {busy[0]}")

    row.get_by_role("link", name=str(waiting)).click()
    expect(page.locator("#waiting-reason")).to_have_text(full)
    (dashboard.flags / "release").touch()
    for job_id in (*busy, waiting, after):
        dashboard.wait_state(job_id, "completed")


def test_a_failed_group_is_discarded_and_a_finished_job_deleted(
    dashboard: Dashboard, page: Any
) -> None:
    (dashboard.flags / "fail").touch()
    failed = [dashboard.post_job(type="flaky") for _ in range(2)]
    for job_id in failed:
        dashboard.wait_state(job_id, "failed")
    (dashboard.flags / "fail").unlink()
    done = dashboard.post_job(type="flaky")
    dashboard.wait_state(done, "completed")

    page.goto(f"{dashboard.url}/dashboard/failed")
    group = page.locator("section.error-group").filter(has_text="upstream refused")
    page.once("dialog", lambda d: d.accept())
    group.get_by_role("button", name="Discard 2 jobs").click()
    expect(page.locator("#flash")).to_contain_text("Discard of 2 jobs started")
    for job_id in failed:
        wait_for(
            lambda i=job_id: httpx.get(f"{dashboard.url}/v1/jobs/{i}").status_code == 404,
            30,
            f"job {job_id} discarded",
        )
    expect(page.locator("p.empty")).to_have_text("No failed job.")

    page.goto(f"{dashboard.url}/dashboard/jobs?state=completed")
    expect(page.locator(f'tr[data-job="{done}"] .duration')).not_to_have_text("")
    page.goto(f"{dashboard.url}/dashboard/jobs/{done}")
    expect(page.locator("table.attempts .duration")).not_to_have_text("")
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Delete").click()
    expect(page).to_have_url(f"{dashboard.url}/dashboard/jobs")
    gone = httpx.get(f"{dashboard.url}/v1/jobs/{done}")
    assert gone.status_code == 404, gone.text
