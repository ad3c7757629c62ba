"""The dashboard when hipq has tokens: sign in with a token, pages need read, actions
need the scope of the API route they call, and the sign-in cookie reads pages only
(a forged cross-site request can change nothing)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from hipq.dashboard.access import COOKIE
from tests.dashboard.conftest import Dashboard

pytestmark = pytest.mark.e2e

ADMIN = "hipq_test-admin-0123456789abcdef"
VIEWER = "hipq_test-viewer-0123456789abcdef"
OPERATOR = "hipq_test-operator-0123456789abcdef"
TENANT = "hipq_test-tenant-0123456789abcdef"


@pytest.fixture
def dashboard_tokens() -> dict[str, str]:
    return {
        "admin": f"admin {ADMIN}",
        "viewer": f"read {VIEWER}",
        "operator": f"read,operate {OPERATOR}",
        "tenant": f"submit,read queue=default {TENANT}",
    }


def sign_in(page: Any, dashboard: Dashboard, token: str, path: str = "/dashboard") -> None:
    page.goto(f"{dashboard.url}{path}")
    expect(page).to_have_url(f"{dashboard.url}/dashboard/login?next={path.replace('/', '%2F')}")
    page.get_by_label("token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{dashboard.url}{path}")


def test_pages_need_a_token_with_read_and_actions_their_routes_scope(
    dashboard: Dashboard, page: Any
) -> None:
    page.goto(f"{dashboard.url}/dashboard/failed")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    dashboard.screenshot(page, "sign-in")
    page.get_by_label("token").fill("hipq_not-a-token-at-all-000000")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#flash")).to_have_text("the bearer token is not valid")
    page.get_by_label("token").fill(TENANT)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#flash")).to_contain_text("restricted to queues or job types")

    page.get_by_label("token").fill(VIEWER)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{dashboard.url}/dashboard/failed")
    expect(page.locator(".who")).to_contain_text("viewer")

    # Read, not operate: the API refuses the pause and the page says why.
    page.goto(f"{dashboard.url}/dashboard")
    page.locator("#queue-default").get_by_role("button", name="Pause").click()
    expect(page.locator("#flash")).to_have_text("403 token 'viewer' lacks the 'operate' scope")
    assert dashboard.server.get("/v1/queues/default")["paused"] is False

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    page.goto(f"{dashboard.url}/dashboard")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()

    sign_in(page, dashboard, OPERATOR)
    page.locator("#queue-default").get_by_role("button", name="Pause").click()
    expect(page.locator("#flash")).to_have_text("Queue default paused")
    assert dashboard.server.get("/v1/queues/default")["paused"] is True


def test_the_cookie_reads_pages_and_changes_nothing(dashboard: Dashboard, page: Any) -> None:
    sign_in(page, dashboard, OPERATOR)
    (cookie,) = [c for c in page.context.cookies() if c["name"] == COOKIE]
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/dashboard"

    # What a forged cross-site request would carry: the cookie, and no header.
    jar = {COOKIE: cookie["value"]}
    with httpx.Client(base_url=dashboard.url, cookies=jar) as browser_like:
        assert browser_like.get("/dashboard/jobs").status_code == 200
        assert browser_like.post("/v1/queues/default/pause").status_code == 401
        assert browser_like.get("/v1/jobs").status_code == 401
        assert browser_like.post("/dashboard/session").status_code == 401
    assert dashboard.server.get("/v1/queues/default")["paused"] is False
    # A page without the cookie is a redirect to the sign-in page, not a JSON 401.
    with httpx.Client(base_url=dashboard.url) as stranger:
        response = stranger.get("/dashboard/jobs?state=failed")
        assert response.status_code == 303
        assert (
            response.headers["location"]
            == "/dashboard/login?next=%2Fdashboard%2Fjobs%3Fstate%3Dfailed"
        )
        # Signing in goes back into the dashboard only, never to another site.
        login = stranger.get("/dashboard/login?next=https://elsewhere.example/")
        assert 'data-next="/dashboard"' in login.text


def test_a_tab_that_holds_its_token_signs_in_again_when_its_session_is_unknown(
    dashboard: Dashboard, page: Any
) -> None:
    # As after a restart, or behind another hipq process: the server knows no session
    # for the cookie, the tab still holds its token.
    sign_in(page, dashboard, VIEWER)
    first = [c["value"] for c in page.context.cookies() if c["name"] == COOKIE]
    page.context.clear_cookies()
    page.goto(f"{dashboard.url}/dashboard/failed")
    expect(page).to_have_url(f"{dashboard.url}/dashboard/failed")
    expect(page.locator(".who")).to_contain_text("viewer")
    second = [c["value"] for c in page.context.cookies() if c["name"] == COOKIE]
    assert second and second != first
