"""The dashboard's browser tests: a real `hipq serve`, a real external HTTP service on
loopback, and headless Chromium driven by Playwright.

The browser is the system's Chromium (Debian's ``chromium`` package, which
scripts/test installs): Playwright's own browser download is not used. With
``HIPQ_DASHBOARD_SCREENSHOTS=1`` the tests also write the screenshots of
docs/dashboard.md into docs/images/ (on SQLite only, so each is written once).
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from playwright.sync_api import expect

from tests.api.conftest import Api, open_api
from tests.dashboard.dashboard_handlers import FLAGS_ENV
from tests.e2e.conftest import REPO, HipqServer, Servers, wait_for
from tests.services import create_database_sync, drop_database_sync, unique_database_name

CHROMIUM = Path(os.environ.get("HIPQ_TEST_CHROMIUM", "/usr/bin/chromium"))
SCREENSHOTS_ENV = "HIPQ_DASHBOARD_SCREENSHOTS"
IMAGES = REPO / "docs" / "images"
HANDLERS = "tests.dashboard.dashboard_handlers"
# Waits in the browser: generous, since the machine may be loaded; a passing test
# never waits this long.
UI_TIMEOUT_MS = 20_000
# expect() has its own default (5 s), shorter than a page's live refresh plus a slow tick.
expect.set_options(timeout=UI_TIMEOUT_MS)


class _Accepting(BaseHTTPRequestHandler):
    """The external system: takes each request (202) and answers later, if ever."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = b"{}"
        self.send_response(202)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def external() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Accepting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def dashboard_config(database_url: str, external: str) -> dict[str, Any]:
    return {
        "database_url": database_url,
        "migrate_on_start": True,
        "log_level": "warning",
        "queues": {
            "default": {"concurrency": 10, "batch_interval": "200ms"},
            # Two capacity units, one per region: a second east job waits for its share.
            "regional": {
                "concurrency": 2,
                "batch_interval": "200ms",
                "throttlers": [{"share": {"label": "region", "shares": {"east": 50, "west": 50}}}],
            },
        },
        # Its fire time is far away: only "Run now" makes its jobs during a test.
        "schedules": {
            "yearly-report": {
                "cron": "0 3 1 1 *",
                "timezone": "Europe/Berlin",
                "job": {"type": "flaky"},
            }
        },
        "job_types": {
            "flaky": {
                "transport": {"python": {"handler": f"{HANDLERS}:flaky"}},
                "retry": {"strategy": "none"},
            },
            "hold": {
                "queue": "regional",
                "transport": {"python": {"handler": f"{HANDLERS}:hold"}},
                "retry": {"strategy": "none"},
            },
            "charge": {
                "correlation_key": "{payload.order_id}",
                "outcome": {"field": "status", "success": ["ok"]},
                "retry": {"strategy": "none"},
                "transport": {"http": {"url": f"{external}/charges", "timeout": "5s"}},
            },
        },
    }


@dataclass
class Dashboard:
    server: HipqServer
    flags: Path
    engine: str

    @property
    def url(self) -> str:
        return self.server.url

    def job(self, job_id: int) -> dict[str, Any]:
        return self.server.get(f"/v1/jobs/{job_id}")

    def post_job(self, **fields: Any) -> int:
        return int(self.server.post("/v1/jobs", fields)["id"])

    def wait_state(self, job_id: int, state: str, timeout: float = 30) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["state"] == state else None

        return wait_for(check, timeout, f"job {job_id} {state}", describe=self.server.describe)

    def screenshot(self, page: Any, name: str) -> None:
        """docs/images/dashboard-NAME.png, when asked for and on SQLite."""
        if os.environ.get(SCREENSHOTS_ENV) == "1" and self.engine == "sqlite":
            IMAGES.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(IMAGES / f"dashboard-{name}.png"), full_page=True)


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[Api]:
    """The API in process, its loops driven by the test (tests/api/conftest.py)."""
    async with open_api(database_url) as opened:
        yield opened


@pytest.fixture
async def sqlite_api(tmp_path: Path, sqlite_template: Path) -> AsyncIterator[Api]:
    """The API on SQLite only, for pages that answer bad input before any read."""
    path = tmp_path / "hipq.db"
    shutil.copy(sqlite_template, path)
    async with open_api(f"sqlite+aiosqlite:///{path}") as opened:
        yield opened


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def served_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database for one `hipq serve` (which migrates it), once per engine.

    Synchronous on purpose: Playwright's sync API runs its own event loop in the
    test's thread, which the async fixtures of the other suites would collide with.
    """
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}"
        return
    admin = request.getfixturevalue("postgres_admin_url")
    name = unique_database_name("hipq_dash")
    url = create_database_sync(admin, name)
    try:
        yield url
    finally:
        drop_database_sync(admin, name)


@pytest.fixture
def dashboard_tokens() -> dict[str, str]:
    """Token name -> "scopes secret" for the server (none: hipq is open); a module
    that tests sign-in overrides this fixture."""
    return {}


@pytest.fixture
def dashboard(
    served_database: str,
    external: str,
    dashboard_tokens: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Dashboard]:
    database_url = served_database
    flags = tmp_path / "flags"
    flags.mkdir()
    monkeypatch.setenv(FLAGS_ENV, str(flags))
    settings = dashboard_config(database_url, external)
    if dashboard_tokens:
        tokens_file = tmp_path / "tokens"
        tokens_file.write_text("".join(f"{n} {v}\n" for n, v in dashboard_tokens.items()))
        settings["auth"] = {"tokens_file": str(tokens_file)}
    config = tmp_path / "hipq.yaml"
    config.write_text(yaml.safe_dump(settings))
    servers = Servers(tmp_path)
    try:
        server = servers.start("dashboard", config)
        if "admin" in dashboard_tokens:  # the test's own API calls
            secret = dashboard_tokens["admin"].split()[-1]
            server.client.headers["Authorization"] = f"Bearer {secret}"
        yield Dashboard(
            server, flags, "sqlite" if database_url.startswith("sqlite") else "postgres"
        )
    finally:
        servers.close()
        for s in servers.started:
            print(s.describe())


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium for one test (Playwright's loop lives only as long as it)."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"no Chromium at {CHROMIUM}: scripts/test installs Debian's chromium "
            "(apt-get install chromium), or set HIPQ_TEST_CHROMIUM"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM))
        try:
            yield launched
        finally:
            launched.close()


def _refused(text: str) -> bool:
    """The console's note of a 4xx answer to an action's fetch: the tests ask for some."""
    return "Failed to load resource: the server responded with a status of 4" in text


@pytest.fixture
def page(browser: Any, dashboard: Dashboard) -> Iterator[Any]:
    """A browser page that may load nothing but the hipq server under test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(UI_TIMEOUT_MS)
    outside: list[str] = []

    def only_hipq(route: Any) -> None:
        host = urlparse(route.request.url).netloc
        if host == f"127.0.0.1:{dashboard.server.port}":
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_hipq)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    # Content-Security-Policy violations and failed loads show up as console errors.
    opened.on(
        "console",
        lambda m: errors.append(m.text) if m.type == "error" and not _refused(m.text) else None,
    )
    try:
        yield opened
    finally:
        context.close()
    assert not outside, f"the page tried to load from elsewhere: {outside}"
    assert not errors, f"script errors on the page: {errors}"
