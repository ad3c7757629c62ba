"""Hostile input to the dashboard's pages answers a 4xx page (or the page itself),
never a 500, on both engines: the pages read their query strings by hand, so
schemathesis, which walks the API's schema, does not reach them."""

from __future__ import annotations

import re
from urllib.parse import quote

import httpx
from fastapi.routing import APIRoute

from hipq.app import create_app
from hipq.dashboard import pages
from tests.api.conftest import Api

# Every query parameter a dashboard page reads (hipq/dashboard/pages.py, filters.py).
PARAMS = (
    "before",
    "since",
    "until",
    "state",
    "label",
    "queue",
    "type",
    "job_key",
    "correlation_key",
    "status",
    "next",
    "cursor",
)
HOSTILE = (
    "9" * 20,  # past 64 bits
    "9223372036854775808",  # 2**63
    "9" * 5000,  # past int()'s 4,300 digits
    "-1",
    "0",
    "٣",  # a digit, not ASCII
    "²",
    "ü/é",
    "a\x00b",
    "\x00",
    "x" * 10_000,
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",  # before datetime's first day once in UTC
    "9999-12-31T23:59:59",
    "9999-12-31T23:59:59.999999-01:00",  # after its last
    "a:\x00",
)


def _page_routes() -> list[str]:
    """The path of every GET route of the dashboard, with its parameters unfilled."""
    return sorted(
        r.path
        for router in (pages.router, pages.open_router)
        for r in router.routes
        if isinstance(r, APIRoute) and "GET" in r.methods
    )


async def test_no_dashboard_page_answers_5xx_to_hostile_values(api: Api) -> None:
    # A few rows, so that the pages' reads (the job list's id ranges) run for real.
    job = await api.post_job(type="ok", labels={"a": "1"})
    await api.client.post("/v1/callbacks/k-1", json={"status": "ok"})
    made = await api.client.post("/v1/jobs/batch", json={"jobs": [{"type": "ok"}], "batch": {}})
    assert made.json()["batch_id"] == 1
    routes = _page_routes()
    assert {
        "/dashboard/jobs",
        "/dashboard/jobs/{job_id}",
        "/dashboard/responses",
        "/dashboard/batches",
        "/dashboard/batches/{batch_id}",
    } <= set(routes)
    # The app's exceptions become the 500 a browser would see, instead of being raised.
    app = create_app(api.service, manage_service=False)
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    failures: list[str] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        requests: list[tuple[str, dict[str, str]]] = []
        for route in routes:
            if "{" in route:  # the value as the path's parameter, and each query's
                filled = [re.sub(r"\{\w+\}", quote(v, safe=""), route) for v in HOSTILE]
                requests += [(path, {}) for path in filled]
                # Job 1 and batch 1 exist: their pages read the query too.
                real = re.sub(r"\{\w+\}", "1", route)
                requests += [(real, {n: v}) for n in PARAMS for v in HOSTILE]
            else:  # the value as each query parameter in turn
                requests += [(route, {n: v}) for n in PARAMS for v in HOSTILE]
        # A filter of each kind at once, as a person's form sends them.
        requests.append(("/dashboard/jobs", {"since": HOSTILE[11], "until": HOSTILE[13]}))
        for path, query in requests:
            response = await client.get(path, params=query)
            if response.status_code >= 500:
                failures.append(f"{response.status_code} GET {path[:60]} {query!r:.80}")
    cases = len(requests)
    assert not failures, f"{len(failures)} of {cases} answered 5xx:\n" + "\n".join(failures)
    assert (await api.job(job["id"]))["state"] == "scheduled"
