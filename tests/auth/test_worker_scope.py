"""The workers scope: only its tokens fetch and report, and a token restricted to
some job types serves only those (403 for a fetch of others; a job of another type
answers as one that does not exist)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hipq.security.tokens import config_line, new_token
from tests.api.conftest import Api, open_api

PULL = {"pull_a": {"transport": "pull"}, "pull_b": {"transport": "pull"}}


@pytest.fixture
def secrets() -> dict[str, str]:
    return {name: new_token() for name in ("worker", "worker_a", "submitter", "admin")}


@pytest.fixture
async def authed(database_url: str, tmp_path: Path, secrets: dict[str, str]) -> AsyncIterator[Api]:
    lines = [
        config_line("worker", ["workers"], secrets["worker"]),
        config_line("worker-a", ["workers"], secrets["worker_a"], types=["pull_a"]),
        config_line("submitter", ["submit"], secrets["submitter"]),
        config_line("admin", ["admin"], secrets["admin"]),
    ]
    (tmp_path / "tokens").write_text("\n".join(lines) + "\n")
    async with open_api(
        database_url, auth={"tokens_file": str(tmp_path / "tokens")}, job_types=PULL
    ) as opened:
        yield opened


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def test_only_worker_tokens_fetch(authed: Api, secrets: dict[str, str]) -> None:
    body = {"types": ["pull_a"]}
    assert (await authed.client.post("/v1/workers/fetch", json=body)).status_code == 401
    refused = await authed.client.post(
        "/v1/workers/fetch", json=body, headers=bearer(secrets["submitter"])
    )
    assert refused.status_code == 403
    assert refused.json()["error"] == "forbidden"
    for who in ("worker", "worker_a", "admin"):
        taken = await authed.client.post(
            "/v1/workers/fetch", json=body, headers=bearer(secrets[who])
        )
        assert taken.status_code == 200, (who, taken.text)
    # A worker token submits nothing.
    submit = await authed.client.post(
        "/v1/jobs", json={"type": "pull_a"}, headers=bearer(secrets["worker"])
    )
    assert submit.status_code == 403


async def test_a_restricted_worker_serves_its_types_only(
    authed: Api, secrets: dict[str, str]
) -> None:
    admin, worker_a = bearer(secrets["admin"]), bearer(secrets["worker_a"])
    other = await authed.client.post(
        "/v1/workers/fetch", json={"types": ["pull_a", "pull_b"]}, headers=worker_a
    )
    assert other.status_code == 403
    assert other.json()["field"] == "types"
    assert "pull_b" in other.json()["message"]
    # A job of pull_b fetched by another worker: its token does not let worker-a report,
    # and the job answers worker-a as an absent one does.
    posted = await authed.client.post("/v1/jobs", json={"type": "pull_b"}, headers=admin)
    await authed.tick()
    fetched = await authed.client.post(
        "/v1/workers/fetch", json={"types": ["pull_b"]}, headers=bearer(secrets["worker"])
    )
    [job] = fetched.json()["jobs"]
    assert job["id"] == posted.json()["id"]
    foreign = await authed.client.post(
        f"/v1/workers/jobs/{job['id']}/complete", json={"token": job["token"]}, headers=worker_a
    )
    assert foreign.status_code == 404
    absent = await authed.client.post(
        "/v1/workers/jobs/999999/complete", json={"token": job["token"]}, headers=worker_a
    )
    assert (absent.status_code, absent.json()["field"]) == (404, foreign.json()["field"])
    mine = await authed.client.post(
        f"/v1/workers/jobs/{job['id']}/complete",
        json={"token": job["token"]},
        headers=bearer(secrets["worker"]),
    )
    assert mine.status_code == 202


async def test_waiting_fetches_are_bounded_per_token(
    database_url: str, tmp_path: Path, secrets: dict[str, str]
) -> None:
    """One workers token cannot hold every connection with waiting fetches: past
    ``server.max_waits_per_token`` its next waiting fetch is a 429; another token, and
    a fetch that does not wait, are still answered."""
    lines = [
        config_line("worker", ["workers"], secrets["worker"]),
        config_line("worker-a", ["workers"], secrets["worker_a"], types=["pull_a"]),
        config_line("admin", ["admin"], secrets["admin"]),
    ]
    (tmp_path / "tokens").write_text("\n".join(lines) + "\n")
    async with open_api(
        database_url,
        auth={"tokens_file": str(tmp_path / "tokens")},
        job_types=PULL,
        server={"max_waits_per_token": 2},
    ) as api:
        worker, worker_a = bearer(secrets["worker"]), bearer(secrets["worker_a"])
        body = {"types": ["pull_a"], "wait": 60}
        held = [
            asyncio.create_task(api.client.post("/v1/workers/fetch", json=body, headers=worker))
            for _ in range(2)
        ]
        for _ in range(1000):
            if api.service.fetches.waiting >= 2:
                break
            await asyncio.sleep(0.01)
        refused = await api.client.post("/v1/workers/fetch", json=body, headers=worker)
        assert refused.status_code == 429, refused.text
        assert refused.json()["field"] == "wait" and refused.headers["Retry-After"].isdigit()
        now = await api.client.post("/v1/workers/fetch", json={"types": ["pull_a"]}, headers=worker)
        assert (now.status_code, now.json()["jobs"]) == (200, [])
        other = asyncio.create_task(
            api.client.post("/v1/workers/fetch", json=body, headers=worker_a)
        )
        admin = bearer(secrets["admin"])
        posted = [
            (await api.client.post("/v1/jobs", json={"type": "pull_a"}, headers=admin)).json()
            for _ in range(3)
        ]
        await api.tick()
        answers = await asyncio.wait_for(asyncio.gather(*held, other), 60)
        assert all(a.status_code == 200 for a in answers)
        taken = sorted(j["id"] for a in answers for j in a.json()["jobs"])
        assert taken == sorted(p["id"] for p in posted)
