"""hipq.client.AsyncClient against a real `hipq serve`, on SQLite and PostgreSQL: the
same calls as Client, awaited, with pages as an async iterator."""

from __future__ import annotations

import asyncio

import pytest

from hipq.client import AsyncClient, Conflict, InvalidRequest, NotFound, WaitTimeout
from tests.client.conftest import Server

pytestmark = pytest.mark.e2e


async def test_many_jobs_added_at_once_then_every_page(server: Server) -> None:
    async with AsyncClient(server.url) as hipq:
        assert (await hipq.wait_ready(10))["status"] == "ready"
        added = await asyncio.gather(
            *(hipq.add_job("ok", {"i": i}, labels={"case": "async-pages"}) for i in range(40))
        )
        assert len({j.id for j in added}) == 40
        done = await asyncio.gather(*(hipq.wait(j.id, timeout=30) for j in added))
        assert sorted(j.result["echo"]["i"] for j in done) == list(range(40))

        seen = [j async for j in hipq.iter_jobs(labels={"case": "async-pages"}, page_size=6)]
        assert [j.id for j in seen] == sorted((j.id for j in added), reverse=True)
        completed = [
            j async for j in hipq.iter_jobs(states=["completed"], labels={"case": "async-pages"})
        ]
        assert len(completed) == 40


async def test_verbs_queues_responses_and_errors(server: Server) -> None:
    async with AsyncClient(server.url) as hipq:
        later = await hipq.add_job(
            "ok", run_at="2100-01-01T00:00:00Z", labels={"case": "async-verbs"}
        )
        assert (await hipq.change_job(later.id, priority=1)).priority == 1
        assert (await hipq.cancel_job(later.id)).state == "cancelled"
        assert (await hipq.retry_job(later.id, run_at="2100-01-01T00:00:00Z")).state == "scheduled"
        with pytest.raises(WaitTimeout) as waited:
            await hipq.wait(later.id, timeout=0.5)
        assert waited.value.job.state == "scheduled"

        assert (await hipq.pause_queue("other")).paused
        assert not (await hipq.resume_queue("other")).paused
        assert [q.name for q in await hipq.list_queues()] == ["default", "other"]
        assert (await hipq.get_queue("default")).concurrency == 20

        responses = [r async for r in hipq.iter_responses(matched=True)]
        assert all(r.status == "matched" for r in responses)
        with pytest.raises(NotFound) as missing:
            await hipq.get_response(987654)
        assert missing.value.field == "id" and "987654" in missing.value.message

        with pytest.raises(InvalidRequest) as refused:
            await hipq.add_job("ok", labels={"region": 5})  # type: ignore[dict-item]
        assert refused.value.field == "labels.region"
        done = await hipq.wait((await hipq.add_job("ok")).id, timeout=30)
        with pytest.raises(Conflict):
            await hipq.change_job(done.id, priority=3)
