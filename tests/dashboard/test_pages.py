"""The dashboard's pages over HTTP (no browser): what they show, and how they answer
bad input; and that every file they need ships inside the wheel."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hipq.dashboard import pages
from tests.api.conftest import Api, open_api

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
    assert rate_row is not None and rate_row.groups() == ("2", "2 per 1h")
    assert (
        '<span class="reason">rate 2 per 1h reached</span> <span class="muted">\u00d7 3</span>'
        in default
    )
