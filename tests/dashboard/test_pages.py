"""The dashboard's pages over HTTP (no browser): what they show, and how they answer
bad input; and that every file they need ships inside the wheel."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hipq.dashboard import pages
from tests.api.conftest import Api, open_api
from tests.support import FakeClock

REPO = Path(__file__).resolve().parents[2]


async def test_the_overview_shows_each_queue_and_its_last_hour(api: Api) -> None:
    await api.post_job(type="ok")
    await api.post_job(type="fail", retry={"strategy": "none"})
    await api.tick()
    api.clock.advance(60)
    page = (await api.client.get("/dashboard")).text
    assert 'id="queue-default"' in page and 'id="queue-bulk"' in page
    default = page[page.index('id="queue-default"') :]
    assert "2 attempts, 1 failed" in default
    assert re.search(r"<title>\d\d:\d\d-\d\d:\d\d UTC: 1 completed</title>", default)
    assert "50% failed" in default


async def test_the_overview_shows_each_process_the_queues_it_runs_and_its_load(
    api: Api,
) -> None:
    await api.service.registry.run_once()
    await api.post_job(type="hang")
    await api.tick()
    page = (await api.client.get("/dashboard")).text
    row = re.search(r'<tr id="process-\d+">(.*?)</tr>', page)
    assert row is not None, page[page.index("Processes") :]
    cells = re.findall(r"<td>(.*?)</td>", row.group(1))
    assert cells[0] == api.service.owner
    assert "default" in cells[5] and cells[6] == "1"


async def test_the_job_page_shows_attempts_and_the_api_calls_it_offers(api: Api) -> None:
    failed = (await api.post_job(type="fail", retry={"strategy": "none"}))["id"]
    scheduled = (await api.post_job(type="typed", payload={"order_id": 3}))["id"]
    await api.tick()
    page = (await api.client.get(f"/dashboard/jobs/{failed}")).text
    assert "no retries: RuntimeError: failing on attempt 1" in page
    # The handler's traceback, collapsed and escaped; the API's body has it too.
    assert '<details class="traceback"><summary>traceback</summary>' in page
    assert "tests/handlers.py&#34;, line" in page  # escaped
    [attempt] = (await api.client.get(f"/v1/jobs/{failed}")).json()["attempts"]
    assert 'tests/handlers.py", line' in attempt["traceback"]
    assert attempt["traceback"].split("\n")[1] in html.unescape(page)
    assert f'data-action="POST /v1/jobs/{failed}/retry"' in page
    assert "/cancel" not in page
    page = (await api.client.get(f"/dashboard/jobs/{scheduled}")).text
    assert f'data-action="POST /v1/jobs/{scheduled}/cancel"' in page
    for verb in ("complete", "fail", "reschedule"):
        assert f'data-action="POST /v1/jobs/{scheduled}/{verb}"' in page
    assert f"/v1/jobs/{scheduled}/retry" not in page
    assert "Responses with key <code>order-3</code>" in page


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("state=lost", "state: &#39;lost&#39; is not one of scheduled"),
        ("label=region", "label: &#39;region&#39; must look like name:value"),
        ("since=tomorrow", "since: &#39;tomorrow&#39; is not a date and time"),
        ("since=2026-01-02T00:00&until=2026-01-01T00:00", "until: is before since"),
        ("before=12abc", "before: not a cursor of this page"),
        ("job_key=a%00b", "job_key: "),
    ],
)
async def test_a_bad_filter_is_named_on_the_page(sqlite_api: Api, query: str, message: str) -> None:
    response = await sqlite_api.client.get(f"/dashboard/jobs?{query}")
    assert response.status_code == 422
    assert message in response.text
    assert 'role="alert"' in response.text


@pytest.mark.parametrize(
    ("path", "what"),
    [
        ("/dashboard/jobs/999", "There is no job 999."),
        ("/dashboard/jobs/abc", "There is no job &#39;abc&#39;."),
        ("/dashboard/jobs/99999999999999999999999", "There is no job"),
        ("/dashboard/responses?status=lost", "There is no status &#39;lost&#39;"),
    ],
)
async def test_what_does_not_exist_is_a_404_page(sqlite_api: Api, path: str, what: str) -> None:
    response = await sqlite_api.client.get(path)
    assert response.status_code == 404
    assert what in response.text


async def test_the_dashboard_is_not_part_of_the_api_schema(sqlite_api: Api) -> None:
    schema = (await sqlite_api.client.get("/openapi.json")).json()
    assert not [p for p in schema["paths"] if p.startswith(("/dashboard", "/docs"))]
    assert (await sqlite_api.client.get("/")).headers["location"] == "/dashboard"


async def test_docs_load_swagger_ui_from_this_server(sqlite_api: Api) -> None:
    page = (await sqlite_api.client.get("/docs")).text
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources and all(s.startswith("/docs-assets/") for s in sources), sources
    for source in sources:
        assert (await sqlite_api.client.get(source)).status_code == 200


async def test_docs_carry_a_content_security_policy_and_refuse_frames(sqlite_api: Api) -> None:
    for path in ("/docs", "/docs/oauth2-redirect"):
        answer = await sqlite_api.client.get(path)
        policy = answer.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "script-src 'self' 'sha256-" in policy
        assert "unsafe-eval" not in policy and "script-src 'self' 'unsafe-inline'" not in policy
        assert answer.headers["x-frame-options"] == "DENY"


def test_the_wheel_carries_templates_and_static_files(tmp_path: Path) -> None:
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("hipq-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    source = REPO / "hipq" / "dashboard"
    wanted = {
        f"hipq/dashboard/{p.relative_to(source).as_posix()}"
        for p in source.rglob("*")
        if p.is_file() and p.suffix in (".html", ".js", ".css")
    }
    assert len(wanted) >= 9
    assert wanted <= names, sorted(wanted - names)


async def test_the_inbox_pages_with_a_cursor(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "RESPONSES_PAGE", 2)
    ids = []
    for key in ("k-1", "k-2", "k-3"):
        answer = await api.client.post(f"/v1/callbacks/{key}", json={"status": "ok"})
        ids.append(answer.json()["response_id"])
    first = (await api.client.get("/dashboard/responses")).text
    assert re.findall(r'data-response="(\d+)"', first) == [str(ids[2]), str(ids[1])]
    older = re.search(r'href="(/dashboard/responses\?status=pending&(?:amp;)?before=\d+)"', first)
    assert older is not None
    second = (await api.client.get(older.group(1).replace("&amp;", "&"))).text
    assert re.findall(r'data-response="(\d+)"', second) == [str(ids[0])]
    assert "Older" not in second
    bad = await api.client.get("/dashboard/responses?before=x1")
    assert bad.status_code == 404


async def test_the_overview_shows_rate_use_and_why_due_jobs_wait(database_url: str) -> None:
    rated = {"default": {"throttlers": [{"rate": {"limit": 2, "per": "1h"}}]}, "bulk": {}}
    async with open_api(database_url, queues=rated) as api:
        for _ in range(5):
            await api.post_job(type="ok")
        await api.tick()
        page = (await api.client.get("/dashboard")).text
    default = page[page.index('id="queue-default"') :]
    rate_row = re.search(r"<tr><td>rate</td><td>(\d+)</td><td>([^<]+)</td></tr>", default)
    assert rate_row is not None and rate_row.groups() == ("2", "2 per 1 h")
    assert (
        '<span class="reason">rate 2 per 1h reached</span> <span class="muted">\u00d7 3</span>'
        in default
    )


async def test_the_overview_shows_share_use_against_each_quota(database_url: str) -> None:
    shared = {
        "default": {
            "concurrency": 10,
            "throttlers": [
                {"share": {"label": "region", "shares": {"east": 60, "west": 30}, "other": 10}}
            ],
        },
        "bulk": {},
    }
    async with open_api(database_url, queues=shared) as api:
        page = (await api.client.get("/dashboard")).text
    default = page[page.index('id="queue-default"') :]
    rows = re.findall(r"<tr><td>(region=[^<]+)</td><td>(\d+)</td><td>([^<]+)</td></tr>", default)
    assert rows == [
        ("region=(other)", "0", "1"),
        ("region=east", "0", "6"),
        ("region=west", "0", "3"),
    ]


async def test_a_paused_queue_is_the_reason_its_jobs_wait(api: Api) -> None:
    await api.post_job(type="hang", weight=8)
    await api.tick(ticks=1)
    held = (await api.post_job(type="ok", weight=3))["id"]
    await api.tick(ticks=1)
    stale = (await api.job(held))["waiting_reason"]
    assert stale and "paused" not in stale
    assert (await api.client.post("/v1/queues/default/pause")).status_code == 200
    await api.tick(ticks=1)

    page = (await api.client.get(f"/dashboard/jobs/{held}")).text
    assert '<span class="reason" id="waiting-reason">queue paused</span>' in page
    assert stale not in page
    listed = (await api.client.get("/dashboard/jobs?queue=default")).text
    row = listed[listed.index(f'<tr data-job="{held}">') :]
    assert row[: row.index("</tr>")].count("queue paused") == 1

    assert (await api.client.post("/v1/queues/default/resume")).status_code == 200
    page = (await api.client.get(f"/dashboard/jobs/{held}")).text
    assert "queue paused" not in page


async def test_values_read_as_a_person_writes_them(sqlite_api: Api) -> None:
    job = (await sqlite_api.post_job(type="ok", timeout="24h"))["id"]
    page = (await sqlite_api.client.get(f"/dashboard/jobs/{job}")).text
    assert "<dt>critical</dt><dd>no</dd>" in page
    assert "<dt>timeout</dt><dd>24 h</dd>" in page
    # A bound given with an offset is shown in UTC, as the field's label says.
    listed = await sqlite_api.client.get("/dashboard/jobs?since=2026-05-01T10:00:00%2B02:00")
    assert 'name="since" type="datetime-local" step="1" value="2026-05-01T08:00:00"' in listed.text


async def test_every_page_has_an_icon(sqlite_api: Api) -> None:
    page = (await sqlite_api.client.get("/dashboard")).text
    icon = re.search(r'<link rel="icon" href="([^"]+)"', page)
    assert icon is not None
    served = await sqlite_api.client.get(icon.group(1))
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("image/svg+xml")
    # A browser asks for /favicon.ico of a page without a link (JSON, /docs, /metrics).
    assert (await sqlite_api.client.get("/favicon.ico")).status_code == 200


def test_display_values() -> None:
    from hipq.dashboard import display

    assert [display.yes_no(v) for v in (True, False, None)] == ["yes", "no", "—"]
    assert [
        display.duration(s) for s in (86_400.0, 172_800.0, 3_600.0, 300.0, 90.0, 1.5, 0.25, 0)
    ] == ["24 h", "2 d", "1 h", "5 min", "90 s", "1.5 s", "250 ms", "0 s"]


async def test_the_job_list_offers_its_filter_to_the_bulk_api(sqlite_api: Api) -> None:
    page = (await sqlite_api.client.get("/dashboard/jobs")).text
    assert 'data-selected="retry"' in page and 'data-selected="delete"' in page
    assert "Retry all" not in page  # no filter: a bulk verb needs a condition
    query = "queue=default&state=failed&label=region:east&until=2026-05-01T08:00:00"
    page = (await sqlite_api.client.get(f"/dashboard/jobs?{query}")).text
    bodies = re.findall(r"data-body='([^']+)'", page)
    assert [json.loads(html.unescape(b)) for b in bodies] == [
        {
            "action": action,
            "filter": {
                "queue": "default",
                "states": ["failed"],
                "labels": {"region": "east"},
                "created_before": "2026-05-01T08:00:00.000001+00:00",
            },
        }
        for action in ("retry", "delete")
    ]
    # What the list would send is what the bulk API takes.
    for b in bodies:
        body = {**json.loads(html.unescape(b)), "dry_run": True}
        answer = await sqlite_api.client.post("/v1/jobs/bulk", json=body)
        assert answer.status_code == 200, answer.text
    page = (await sqlite_api.client.get("/dashboard/jobs?correlation_key=A-1")).text
    assert "Retry all" not in page


async def test_history_shows_execution_times_per_type_after_a_restart(database_url: str) -> None:
    clock = FakeClock()
    async with open_api(database_url, clock=clock) as api:
        ids = [(await api.post_job(type="hang"))["id"] for _ in range(3)]
        await api.tick(ticks=1)
        for seconds, job_id in zip((10, 10, 10), ids, strict=True):
            clock.advance(seconds)
            answer = await api.client.post(f"/v1/jobs/{job_id}/complete", json={})
            assert answer.status_code in (200, 202), answer.text
            await api.tick(ticks=1)
        for job_id in ids:
            assert (await api.job(job_id))["state"] == "completed"
    clock.advance(2 * 3600)  # out of the overview's hour
    async with open_api(database_url, clock=clock) as api:  # a restart
        page = (await api.client.get("/dashboard/history?period=24h")).text
        row = page[page.index('<tr data-type="hang">') :]
        row = row[: row.index("</tr>")]
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
        assert cells[1:] == ["3", "3", "0", "20 s", "30 s", "30 s"]
        default = page[page.index('data-queue="default"') :]
        assert "3 attempts, 0 failed" in default
        assert "<svg" in default and 'class="tick">0</text>' in default
        page = (await api.client.get("/dashboard/history?period=1h")).text
        assert "no attempt in this period" in page
        missing = await api.client.get("/dashboard/history?period=2y")
        assert missing.status_code == 404


def test_percentiles_are_nearest_rank() -> None:
    from hipq.dashboard.history import percentile

    assert percentile([1.0], 0.95) == 1.0
    values = [float(n) for n in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.95)) == (50.0, 95.0)


async def test_an_unknown_response_suggests_in_flight_jobs_with_a_close_key(api: Api) -> None:
    meant = (await api.post_job(type="hang", correlation_key="order-1017"))["id"]
    other = (await api.post_job(type="hang", correlation_key="invoice-88"))["id"]
    await api.tick(ticks=1)
    assert (await api.job(meant))["state"] == "running"
    answer = await api.client.post("/v1/callbacks/order-1071", json={"status": "ok"})
    assert answer.status_code == 202, answer.text

    page = (await api.client.get("/dashboard/responses")).text
    suggested = page[page.index('<ul class="candidates"') :]
    suggested = suggested[: suggested.index("</ul>")]
    assert f"job {meant}</button>" in suggested and "key 2 edits away" in suggested
    assert f"job {other}</button>" not in suggested
    assert 'data-action="POST /v1/responses/' in suggested


def test_candidates_rank_close_keys_first() -> None:
    from datetime import UTC, datetime

    from hipq.dashboard.candidates import edit_distance, rank
    from hipq.store.operator_reads import KeyedJob
    from hipq.store.records import Response

    assert (edit_distance("A-17", "A-71"), edit_distance("", "abc"), edit_distance("x", "x")) == (
        2,
        3,
        0,
    )
    now = datetime(2026, 1, 1, tzinfo=UTC)
    response = Response(
        1, "A-71", "webhook", now, now, True, None, {}, None, "charge", "pending", None, None, None
    )
    jobs = [
        KeyedJob(1, "A-17", "charge", "awaiting"),
        KeyedJob(2, "A-71x", "ship", "awaiting"),
        KeyedJob(3, "B-999", "charge", "running"),
        KeyedJob(4, "Q-123456", "ship", "running"),
    ]
    assert [(c.job.id, c.why) for c in rank(response, jobs)] == [
        (2, "key 1 edit away"),
        (1, "key 2 edits away"),
        (3, "running, of type charge"),
    ]


async def test_the_overview_offers_to_change_and_reset_a_queues_limits(
    database_url: str,
) -> None:
    shared = {
        "default": {
            "concurrency": 10,
            "throttlers": [{"share": {"label": "region", "shares": {"east": 60, "west": 40}}}],
        },
        "bulk": {},
    }
    async with open_api(database_url, queues=shared) as api:
        page = (await api.client.get("/dashboard")).text
        default = page[page.index('id="queue-default"') :]
        assert 'data-action="PATCH /v1/queues/default/limits"' in default
        assert "limits changed by" not in default
        body = {"concurrency": 20, "throttlers": {"0": {"shares": {"east": 50, "west": 50}}}}
        answer = await api.client.patch("/v1/queues/default/limits", json=body)
        assert answer.status_code == 200, answer.text
        page = (await api.client.get("/dashboard")).text
    default = page[page.index('id="queue-default"') :]
    assert "limits changed by anonymous" in default
    assert 'data-action="DELETE /v1/queues/default/limits"' in default
    assert "0 / 20 in use" in default
    rows = re.findall(r"<tr><td>(region=[^<]+)</td><td>(\d+)</td><td>([^<]+)</td></tr>", default)
    assert rows == [("region=east", "0", "10"), ("region=west", "0", "10")]
