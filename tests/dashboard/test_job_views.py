"""What the dashboard's pages say of jobs and their queues (over HTTP, no browser):
state tabs with counts, why each job waits apart from its last error, what a job
waits for instead of a parked run time, durations, a job's notifications and its
Delete button, the queues' latency, the responses' counts, and a schedule's next
fire on its own zone's clock."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from tests.api.conftest import open_api
from tests.notifications.conftest import Receiver, notify_settings
from tests.support import FakeClock


def row_of(page: str, job_id: int) -> str:
    row = page[page.index(f'<tr data-job="{job_id}">') :]
    return row[: row.index("</tr>")]


def cell(row: str, name: str) -> str:
    found = re.search(rf'<td class="[^"]*\b{name}\b[^"]*">(.*?)</td>', row, re.S)
    assert found is not None, row
    return found.group(1).strip()


async def test_the_job_list_tells_waiting_from_errors_with_tabs_and_durations(
    database_url: str,
) -> None:
    async with open_api(database_url) as api:
        retrying = (await api.post_job(type="fail"))["id"]
        done = (await api.post_job(type="ok"))["id"]
        await api.tick()
        parked = (await api.post_job(type="ok", after=[retrying]))["id"]
        api.clock.advance(1)
        page = (await api.client.get("/dashboard/jobs")).text

        retry = row_of(page, retrying)
        assert cell(retry, "waiting-reason").startswith("retry 2 not before ")
        assert "failing on attempt 1" in cell(retry, "last-error")
        after = row_of(page, parked)
        assert cell(after, "run-time") == f"after #{retrying}"
        assert "9999" not in after
        assert cell(row_of(page, done), "duration").endswith("s")  # e.g. "12 ms"
        assert cell(row_of(page, done), "waiting-reason") == ""
        tabs = dict(re.findall(r'data-state="(\w+)"[^>]*>\w+ <b class="tab-count">(\d+)</b>', page))
        assert tabs == {"scheduled": "2", "running": "0", "awaiting": "0", "failed": "0"}
        assert 'data-state="completed"' in page  # a tab, not counted

        only = (await api.client.get("/dashboard/jobs?state=scheduled")).text
        current = re.search(r'data-state="(\w+)" aria-current="page"', only)
        assert current is not None and current.group(1) == "scheduled"
        assert f'<tr data-job="{done}">' not in only

        # Retrying: scheduled again after a failed attempt, a tab of its own (the
        # failed page links to it).
        failed_page = (await api.client.get("/dashboard/failed")).text
        assert 'href="/dashboard/jobs?retrying=1" id="retrying-link"' in failed_page
        retrying_page = (await api.client.get("/dashboard/jobs?retrying=1")).text
        current = re.search(r'data-state="(\w+)" aria-current="page"', retrying_page)
        assert current is not None and current.group(1) == "retrying"
        shown = re.findall(r'<tr data-job="(\d+)">', retrying_page)
        assert shown == [str(retrying)]


async def test_the_overview_gives_latency_and_a_full_queues_reason(database_url: str) -> None:
    async with open_api(database_url, queues={"default": {"concurrency": 1}, "bulk": {}}) as api:
        await api.post_job(type="hang")
        await api.tick()
        waiting = (await api.post_job(type="ok"))["id"]
        api.clock.advance(90)
        await api.tick()
        queue = (await api.client.get("/v1/queues/default")).json()
        assert queue["waiting_reason"] == "queue full: concurrency 1/1 in use"
        assert queue["oldest_due_at"] is not None
        page = (await api.client.get("/dashboard")).text
        default = page[page.index('id="queue-default"') :]
        default = default[: default.index("</section>")]
        assert '<td class="latency">90 s</td>' in default
        assert "queue full: concurrency 1/1 in use" in default
        assert "no job held" not in default
        job = (await api.client.get(f"/dashboard/jobs/{waiting}")).text
        assert 'id="waiting-reason">queue full: concurrency 1/1 in use</span>' in job


async def test_the_job_page_shows_notifications_durations_and_delete(database_url: str) -> None:
    receiver = Receiver()
    async with receiver.up(), open_api(database_url, **notify_settings(receiver)) as api:
        done = (await api.post_job(type="ok"))["id"]
        running = (await api.post_job(type="hang"))["id"]
        await api.tick()
        page = (await api.client.get(f"/dashboard/jobs/{done}")).text
        table = page[page.index('id="notifications"') :]
        assert '<tr data-target="hook"><td>hook</td><td>completed (attempt 1)</td>' in table
        assert f'data-action="DELETE /v1/jobs/{done}"' in page
        attempts = page[page.index('class="attempts"') :]
        assert re.search(r'<td class="duration">[\d.]+ ?m?s</td>', attempts), attempts[:800]
        # An open job is not deleted (the API keeps jobs not yet finished).
        assert "DELETE /v1/jobs/" not in (await api.client.get(f"/dashboard/jobs/{running}")).text


async def test_response_tabs_are_counted_and_a_schedule_fires_on_its_own_clock(
    database_url: str,
) -> None:
    schedules = {
        "nightly": {"cron": "0 2 * * *", "timezone": "Europe/Berlin", "job": {"type": "ok"}}
    }
    clock = FakeClock(datetime(2026, 11, 30, 12, 0, tzinfo=UTC))
    async with open_api(database_url, clock=clock, schedules=schedules) as api:
        for key in ("k-1", "k-2"):
            answer = await api.client.post(f"/v1/callbacks/{key}", json={"status": "ok"})
            assert answer.status_code == 202, answer.text
        page = (await api.client.get("/dashboard/responses")).text
        tabs = dict(
            re.findall(r'data-status="(\w+)"[^>]*>\w+ <b class="tab-count">(\d+)</b>', page)
        )
        assert tabs == {
            "pending": "2",
            "late": "0",
            "expired": "0",
            "duplicate": "0",
            "matched": "0",
            "parked": "0",
        }
        page = (await api.client.get("/dashboard/schedules")).text
        assert '<span class="local">2026-12-01 02:00:00 CET</span>' in page
        assert "2026-12-01 01:00:00 UTC" in page
