"""The dashboard's store reads (hipq.store.operator_reads) on both engines: paging by
id windows, time ranges as id ranges, the failed set grouped by error, the chart's
attempt counts, waiting reasons, open keys."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from hipq.store import operator_reads
from hipq.store.operator_reads import JobQuery
from tests.api.conftest import Api, open_api


async def _post(api: Api, n: int, **fields: object) -> list[int]:
    return [(await api.post_job(type="ok", **fields))["id"] for _ in range(n)]


async def _all_pages(api: Api, query: JobQuery) -> tuple[list[int], list[tuple[int, int] | None]]:
    """Every id the query finds, following cursors; and each page's searched ids."""
    found: list[int] = []
    searched: list[tuple[int, int] | None] = []
    before = None
    for _ in range(50):
        page = await api.service.store.job_page(replace(query, before_id=before))
        found += [j.id for j in page.jobs]
        searched.append(page.searched)
        if page.next_cursor is None:
            return found, searched
        before = page.next_cursor
    raise AssertionError("more than 50 pages")


async def test_an_unindexed_filter_pages_by_id_windows(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operator_reads, "JOB_WINDOW", 5)
    ids = []
    for n in range(12):
        ids += await _post(api, 1, labels={"tenant": "a" if n in (1, 8) else "b"})
    found, searched = await _all_pages(api, JobQuery(labels={"tenant": "a"}))
    assert found == [ids[8], ids[1]]
    # Newest first, five ids a page, down to the first id: no page reads more.
    assert searched == [(ids[11], ids[7]), (ids[6], ids[2]), (ids[1], ids[0])]


async def test_a_full_page_continues_after_its_last_job(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operator_reads, "JOB_WINDOW", 100)
    ids = await _post(api, 5, labels={"tenant": "a"})
    page = await api.service.store.job_page(JobQuery(labels={"tenant": "a"}, limit=2))
    assert [j.id for j in page.jobs] == [ids[4], ids[3]]
    assert page.next_cursor == ids[3]
    found, _ = await _all_pages(api, JobQuery(labels={"tenant": "a"}, limit=2))
    assert found == ids[::-1]


async def test_one_state_pages_by_its_index_without_windows(api: Api) -> None:
    ids = await _post(api, 3)
    found, searched = await _all_pages(api, JobQuery(states=("scheduled",), limit=2))
    assert found == ids[::-1]
    assert searched == [None, None]


async def test_a_time_range_becomes_an_id_range(api: Api) -> None:
    start = api.clock()
    early = await _post(api, 3)
    api.clock.advance(3600)
    middle = await _post(api, 3)
    api.clock.advance(3600)
    await _post(api, 3)
    query = JobQuery(
        created_since=start + timedelta(minutes=59), created_until=start + timedelta(minutes=61)
    )
    found, searched = await _all_pages(api, query)
    assert found == middle[::-1]
    assert searched == [(middle[-1], middle[0])]
    # Before every job, and after all of them: nothing, and nothing read.
    before_all = JobQuery(created_until=start - timedelta(hours=1))
    assert (await api.service.store.job_page(before_all)).jobs == []
    assert (await _all_pages(api, JobQuery(created_since=start)))[0][-1] == early[0]


async def test_other_filters(api: Api) -> None:
    keyed = await api.post_job(type="ok", job_key="nightly")
    typed = await api.post_job(type="typed", payload={"order_id": 7})
    await _post(api, 2)
    store = api.service.store
    assert [j.id for j in (await store.job_page(JobQuery(job_key="nightly"))).jobs] == [keyed["id"]]
    by_key = await store.job_page(JobQuery(correlation_key="order-7"))
    assert [j.id for j in by_key.jobs] == [typed["id"]]
    assert by_key.searched is None  # its own index
    assert [j.id for j in (await store.job_page(JobQuery(queue="bulk"))).jobs] == [typed["id"]]
    assert [j.id for j in (await store.job_page(JobQuery(type="typed"))).jobs] == [typed["id"]]
    assert (await store.job_page(JobQuery(queue="nowhere"))).jobs == []


async def test_failed_jobs_grouped_by_error_and_the_last_hours_attempts(api: Api) -> None:
    failing = [
        (await api.post_job(type="fail", retry={"strategy": "none"}))["id"] for _ in range(3)
    ]
    permanent = (await api.post_job(type="permanent"))["id"]
    done = (await api.post_job(type="ok"))["id"]
    await api.tick()
    assert (await api.job(done))["state"] == "completed"

    groups, sampled = await api.service.store.job_error_groups()
    assert sampled == 4
    assert [(g.error, g.count, g.job_ids) for g in groups] == [
        ("no retries: RuntimeError: failing on attempt 1", 3, tuple(failing[::-1])),
        ((await api.job(permanent))["last_error"], 1, (permanent,)),
    ]
    assert groups[0].queues == ("default",) and groups[0].types == ("fail",)

    now = api.clock.advance(60)
    buckets = await api.service.store.attempt_buckets(now - timedelta(hours=1), now, 12)
    counted = {(b.queue, b.outcome, b.bucket): b.count for b in buckets}
    assert counted == {("default", "failed", 11): 4, ("default", "completed", 11): 1}
    # An hour later those attempts are out of the period.
    later = api.clock.advance(3600)
    assert await api.service.store.attempt_buckets(later - timedelta(hours=1), later, 12) == []


async def test_waiting_reasons_and_open_keys(database_url: str) -> None:
    rated = {"default": {"throttlers": [{"rate": {"limit": 1, "per": "1h"}}]}, "bulk": {}}
    async with open_api(database_url, queues=rated) as api:
        await api.post_job(type="ok")
        held = [(await api.post_job(type="ok"))["id"] for _ in range(2)]
        await api.tick()
        reasons = {(await api.job(i))["waiting_reason"] for i in held}
        assert reasons == {"rate 1 per 1h reached"}
        assert await api.service.store.job_due_reasons("default", api.clock()) == [
            ("rate 1 per 1h reached", 2)
        ]

        typed = await api.post_job(type="typed", payload={"order_id": 1})
        assert await api.service.store.job_open_keys(["order-1", "order-2"]) == {
            "order-1": typed["id"]
        }
        assert await api.service.store.job_open_keys([]) == {}
