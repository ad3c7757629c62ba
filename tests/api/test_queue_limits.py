"""Limits changed at run time (PATCH/DELETE /v1/queues/{name}/limits), on both engines:
persisted on the queue's row, applied by its owner at its next tick, refused with a
422 naming the field when the chain would not build, kept across a restart."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.conftest import Api, open_api
from tests.support import eventually

QUEUES: dict[str, Any] = {
    "default": {"concurrency": 1},
    "bulk": {},
    "regions": {
        "concurrency": 10,
        "throttlers": [
            {"share": {"label": "region", "shares": {"east": 40, "west": 60}}},
            {"per_key": {"key": "labels.tenant", "limit": 5}},
            {"rate": {"limit": 100, "per": "1s"}},
            {"window": {}},
        ],
    },
}


async def running(api: Api, queue: str = "default") -> int:
    answer = await api.client.get(f"/v1/queues/{queue}")
    assert answer.status_code == 200, answer.text
    return int(answer.json()["running"])


async def change(api: Api, body: dict[str, Any], queue: str = "default") -> dict[str, Any]:
    answer = await api.client.patch(f"/v1/queues/{queue}/limits", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_a_raised_concurrency_runs_more_at_the_next_tick_and_resets(
    database_url: str,
) -> None:
    async with open_api(database_url, queues=QUEUES) as api:
        for _ in range(5):
            await api.post_job(type="hang")
        await api.tick()
        assert await running(api) == 1

        shown = await change(api, {"concurrency": 3})
        assert shown["concurrency"] == 3
        assert shown["limits"]["overrides"] == {"concurrency": 3}
        assert shown["limits"]["changed_by"] == "anonymous"
        assert shown["limits"]["changed_at"] is not None
        await api.tick(ticks=1)  # the next tick admits by the new limit
        assert await running(api) == 3

        answer = await api.client.delete("/v1/queues/default/limits")
        assert answer.status_code == 200, answer.text
        assert answer.json()["concurrency"] == 1
        assert answer.json()["limits"]["overrides"] == {}
        await api.tick()
        assert await running(api) == 3  # nothing is stopped: the running ones finish
        assert api.loop().config.concurrency == 1


async def test_a_shares_percentages_change_what_each_share_may_hold(database_url: str) -> None:
    async with open_api(database_url, queues=QUEUES) as api:
        for _ in range(8):
            await api.post_job(type="hang", queue="regions", labels={"region": "east"})
        await api.tick("regions")
        assert await running(api, "regions") == 4  # 40 % of 10
        shown = await change(
            api, {"throttlers": {"0": {"shares": {"east": 70, "west": 30}}}}, "regions"
        )
        assert shown["limits"]["throttlers"] == [
            {"share": {"shares": {"east": 70, "west": 30}}},
            {"per_key": {"limit": 5}},
            {"rate": {"limit": 100, "per": "1s"}},
            {"window": {}},
        ]
        await api.tick("regions")
        assert await running(api, "regions") == 7
        # A second change keeps the first one (each setting given replaces its own).
        shown = await change(api, {"throttlers": {"1": {"limit": 2}}}, "regions")
        assert shown["limits"]["overrides"] == {
            "throttlers": {"0": {"shares": {"east": 70, "west": 30}}, "1": {"limit": 2}}
        }


async def test_a_lowered_per_key_limit_holds_at_the_next_tick(database_url: str) -> None:
    async with open_api(database_url, queues=QUEUES) as api:
        await change(api, {"throttlers": {"1": {"limit": 2}}}, "regions")
        for _ in range(4):
            labels = {"region": "west", "tenant": "acme"}
            await api.post_job(type="hang", queue="regions", labels=labels)
        await api.tick("regions")
        assert await running(api, "regions") == 2  # 5 in the config


async def test_a_raised_rate_counts_the_starts_made_before_the_change(
    database_url: str,
) -> None:
    queues = {**QUEUES, "rated": {"throttlers": [{"rate": {"limit": 2, "per": "1h"}}]}}
    async with open_api(database_url, queues=queues) as api:
        ids = [(await api.post_job(type="ok", queue="rated"))["id"] for _ in range(6)]
        await api.tick("rated")

        async def started() -> int:
            jobs = [await api.job(i) for i in ids]
            return sum(j["state"] != "scheduled" for j in jobs)

        assert await started() == 2
        await change(api, {"throttlers": {"0": {"limit": 3}}}, "rated")
        await api.tick("rated", ticks=1)
        assert await started() == 3  # the two of the last hour still count
        await change(api, {"throttlers": {"0": {"per": "1s"}}}, "rated")
        api.clock.advance(2)
        await api.tick("rated")
        assert await started() == 6


BAD: list[tuple[dict[str, Any], str]] = [
    ({"concurrency": 0}, "concurrency"),
    ({"concurrency": -1}, "concurrency"),
    ({"throttlers": {"0": {"shares": {"east": 60, "west": 50}}}}, "throttlers.0.shares"),
    ({"throttlers": {"1": {"limit": 0}}}, "throttlers.1.limit"),
    ({"throttlers": {"2": {"limit": -1}}}, "throttlers.2.limit"),
    ({"throttlers": {"2": {"per": "soon"}}}, "throttlers.2.per"),
    ({"throttlers": {"9": {"limit": 3}}}, "throttlers.9"),
    ({"throttlers": {"x": {"limit": 3}}}, "throttlers.x"),
    ({"throttlers": {"2": {"shares": {"east": 10}}}}, "throttlers.2.shares"),
    ({"throttlers": {"1": {"key": "labels.region"}}}, "throttlers.1.key"),
    ({"throttlers": {"3": {"limit": 3}}}, "throttlers.3.limit"),
    ({"concurrency": 1}, "concurrency"),  # a share's quota of 0.4 units: under one unit
    ({"throttlers": {"0": {"shares": {"ea\u0000st": 40}}}}, r"throttlers.0.shares.ea\u0000st"),
]


async def test_a_change_the_chain_refuses_is_a_422_naming_the_field(database_url: str) -> None:
    async with open_api(database_url, queues=QUEUES) as api:
        for body, field in BAD:
            answer = await api.client.patch("/v1/queues/regions/limits", json=body)
            assert answer.status_code == 422, (body, answer.text)
            assert answer.json()["field"] == field, (body, answer.json())
        shown = (await api.client.get("/v1/queues/regions")).json()
        assert shown["limits"]["overrides"] == {} and shown["limits"]["changed_at"] is None
        assert shown["concurrency"] == 10
        answer = await api.client.patch("/v1/queues/nope/limits", json={"concurrency": 2})
        assert answer.status_code == 404
        # Unlimited only where the config leaves the queue unbounded.
        unbounded = await api.client.patch("/v1/queues/regions/limits", json={"concurrency": None})
        assert (unbounded.status_code, unbounded.json()["field"]) == (422, "concurrency")
        assert "bounds this queue to 10" in unbounded.json()["message"]
        assert (await api.client.get("/v1/queues/regions")).json()["concurrency"] == 10
        assert (await change(api, {"concurrency": None}, "bulk"))["concurrency"] is None


async def test_changed_limits_survive_a_restart(database_url: str) -> None:
    async with open_api(database_url, queues=QUEUES) as api:
        await change(api, {"concurrency": 3})
        for _ in range(5):
            await api.post_job(type="hang")
    async with open_api(database_url, queues=QUEUES) as api:
        shown = (await api.client.get("/v1/queues/default")).json()
        assert shown["concurrency"] == 3 and shown["limits"]["overrides"] == {"concurrency": 3}
        await api.tick(ticks=1)  # the new owner's first tick already admits by it
        assert await running(api) == 3


@pytest.mark.postgres
async def test_a_change_through_another_process_reaches_the_queues_owner(
    postgres_url_fresh: str,
) -> None:
    """Two services on one database (SQLite allows one process per file): the change
    arrives through the one that does not own the queue."""
    async with (
        open_api(postgres_url_fresh, run_loops=True, queues=QUEUES) as owner,
        open_api(postgres_url_fresh, queues=QUEUES) as other,
    ):
        for _ in range(5):
            await other.post_job(type="hang")
        await eventually(lambda: running_is(owner, 1), timeout=60)
        await change(other, {"concurrency": 3})
        assert owner.loop().token is not None and other.loop().token is None
        await eventually(lambda: running_is(owner, 3), timeout=60)


async def running_is(api: Api, count: int) -> bool:
    return await running(api) == count


DOCS = Path(__file__).resolve().parents[2] / "docs"


async def test_the_worked_example_of_the_reference(database_url: str) -> None:
    """The PATCH of docs/reference-api.md, on the queue `regions` of docs/throttling.md."""
    chain = (DOCS / "throttling.md").read_text().split("## The chain", 1)[1]
    regions = yaml.safe_load(chain.split("```yaml", 1)[1].split("```", 1)[0])["queues"]
    section = (DOCS / "reference-api.md").read_text().split("## Queue limits at run time")[1]
    body = json.loads(re.search(r"-d '(\{.*?\})'", section).group(1))  # type: ignore[union-attr]
    async with open_api(database_url, queues={**QUEUES, **regions}) as api:
        shown = await change(api, body, "regions")
        assert shown["concurrency"] == 50
        assert shown["limits"]["throttlers"] == [
            {"share": {"shares": {"east": 60, "north": 20, "west": 20}}},
            {"per_key": {"limit": 5}},
            {"rate": {"limit": 10, "per": "1s"}},
            {"window": {}},
        ]
        await api.tick("regions")
        assert api.loop("regions").config.concurrency == 50
        reset = await api.client.delete("/v1/queues/regions/limits")
        assert reset.json()["concurrency"] == 100
