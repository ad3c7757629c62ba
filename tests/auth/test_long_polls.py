"""Requests held by ?wait= are bounded per token: one token cannot hold every
connection of the server (the others' requests and the probes go on)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.api.conftest import Api, open_api
from tests.auth.conftest import Tokens


@pytest.fixture
async def bounded(database_url: str, tokens: Tokens) -> AsyncIterator[Api]:
    async with open_api(
        database_url,
        auth={"tokens_file": str(tokens.file)},
        server={"max_waits_per_token": 2},
    ) as opened:
        yield opened


async def _registered(api: Api, count: int) -> None:
    for _ in range(1000):
        if api.service.waiters.waiting >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{api.service.waiters.waiting} waiting, not {count}")


async def test_a_token_holds_at_most_its_bound_of_waiting_requests(
    bounded: Api, tokens: Tokens
) -> None:
    api = bounded
    created = await api.client.post(
        "/v1/jobs", json={"type": "ok"}, headers=tokens.header("submit")
    )
    job_id = created.json()["id"]
    reader, admin = tokens.header("read"), tokens.header("admin")
    held = [
        asyncio.create_task(api.client.get(f"/v1/jobs/{job_id}?wait=60s", headers=reader))
        for _ in range(2)
    ]
    await _registered(api, 2)
    refused = await api.client.get(f"/v1/jobs/{job_id}?wait=60s", headers=reader)
    assert refused.status_code == 429, refused.text
    assert refused.headers["Retry-After"].isdigit()
    assert refused.json()["field"] == "wait"
    # Without ?wait= the same token is answered; another token may still wait.
    assert (await api.client.get(f"/v1/jobs/{job_id}", headers=reader)).status_code == 200
    other = asyncio.create_task(api.client.get(f"/v1/jobs/{job_id}?wait=60s", headers=admin))
    await _registered(api, 3)
    assert not other.done()
    await api.tick()  # the job finishes: every waiter is answered, the slots come back
    for answer in await asyncio.gather(*held, other):
        assert answer.status_code == 200 and answer.json()["state"] == "completed"
    again = await api.client.get(f"/v1/jobs/{job_id}?wait=1s", headers=reader)
    assert again.status_code == 200


def test_the_bound_is_a_setting(tmp_path: Path) -> None:
    from hipq.config import ServerConfig

    assert ServerConfig().max_waits_per_token == 20
    with pytest.raises(ValueError):
        ServerConfig(max_waits_per_token=0)
