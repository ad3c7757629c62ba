"""Filters that reached the database as errors (500s): a label name holding `"` (an
unescapable JSON path on SQLite) and instants near datetime's limits. Both engines."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api, api

__all__ = ["api"]  # the fixture

ODD = 'a"b'


async def test_a_label_name_with_a_quote_filters_everywhere(api: Api) -> None:
    odd = await api.post_job(type="ok", labels={ODD: "x", "plain": "y"})
    await api.post_job(type="ok", labels={ODD: "z"})
    listed = await api.client.get("/v1/jobs", params={"label": f"{ODD}:x"})
    assert listed.status_code == 200, listed.text
    assert [j["id"] for j in listed.json()["jobs"]] == [odd["id"]]
    both = await api.client.get("/v1/jobs", params={"label": [f"{ODD}:x", "plain:y"]})
    assert [j["id"] for j in both.json()["jobs"]] == [odd["id"]]
    counted = await api.client.post(
        "/v1/jobs/bulk",
        json={"action": "cancel", "filter": {"labels": {ODD: "x"}}, "dry_run": True},
    )
    assert counted.status_code == 200, counted.text
    assert counted.json()["matched"] == 1
    page = await api.client.get("/dashboard/jobs", params={"label": f"{ODD}:x"})
    assert page.status_code == 200, page.text
    assert f"/dashboard/jobs/{odd['id']}" in page.text


@pytest.mark.parametrize(
    "query",
    [
        "since=0001-01-01T00:00:00Z",
        "until=9999-12-31T23:59:59",
        "since=0001-01-01T00:00:00%2B05:00",
        "until=9999-12-31T23:59:59-05:00",
        "since=1969-12-31T23:59:59Z",
    ],
)
async def test_instants_near_the_limits_are_refused_not_500(api: Api, query: str) -> None:
    await api.post_job(type="ok")
    page = await api.client.get(f"/dashboard/jobs?{query}")
    assert 400 <= page.status_code < 500, page.text
    assert query.split("=")[0] in page.text


async def test_a_wide_range_within_the_limits_is_read(api: Api) -> None:
    job = await api.post_job(type="ok")
    page = await api.client.get(
        "/dashboard/jobs?since=1970-01-01T00:00:00Z&until=8999-12-31T23:59:59Z"
    )
    assert page.status_code == 200, page.text
    assert f"/dashboard/jobs/{job['id']}" in page.text
