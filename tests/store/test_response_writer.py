"""ResponseWriter (group commit of webhook responses) on SQLite and PostgreSQL.

The store is the real one, built by the ``store`` fixture from ``database_url``. To
see how many transactions a burst took, ``response_insert_many`` is wrapped on the
instance by a function that only counts the batches and calls the original.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy.exc

from hipq.ingest.response_writer import ResponseWriter
from hipq.store import NewResponse, Store

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
TTL = 60.0


def response(key: str, **fields: Any) -> NewResponse:
    base: dict[str, Any] = {"correlation_key": key, "source": "webhook", "succeeded": True}
    return NewResponse(**{**base, **fields})


def count_batches(store: Store) -> list[list[str]]:
    """Record the correlation keys of each call to ``store.response_insert_many``."""
    batches: list[list[str]] = []
    original: Callable[..., Awaitable[list[int]]] = store.response_insert_many

    async def counting(new: Any, *args: Any, **kwargs: Any) -> list[int]:
        batches.append([r.correlation_key for r in new])
        return await original(new, *args, **kwargs)

    store.response_insert_many = counting  # type: ignore[method-assign]
    return batches


async def stored(store: Store) -> dict[int, str]:
    """Every stored response: id -> correlation key."""
    return {r.id: r.correlation_key for r in await store.response_list(limit=10_000)}


@pytest.fixture
def writer(store: Store) -> ResponseWriter:
    return ResponseWriter(store, lambda: T0, TTL)


async def test_a_burst_of_writes_shares_few_transactions(
    store: Store, writer: ResponseWriter
) -> None:
    batches = count_batches(store)
    keys = [f"order-{n}" for n in range(300)]
    ids = await asyncio.wait_for(asyncio.gather(*(writer.write(response(key)) for key in keys)), 30)
    assert len(set(ids)) == 300
    # Each caller got the id of its own response.
    assert await stored(store) == dict(zip(ids, keys, strict=True))
    assert sorted(key for batch in batches for key in batch) == sorted(keys)
    assert len(batches) < 50


async def test_a_lone_write_is_stored_at_once(store: Store, writer: ResponseWriter) -> None:
    new = response(
        "order-1",
        succeeded=False,
        reason="declined",
        body={"status": "declined", "amount": 12},
        headers={"content-type": "application/json"},
        job_type="charge",
    )
    response_id = await asyncio.wait_for(writer.write(new), 2)
    got = await store.response_get(response_id)
    assert (got.correlation_key, got.source, got.succeeded, got.reason) == (
        "order-1",
        "webhook",
        False,
        "declined",
    )
    assert got.body == {"status": "declined", "amount": 12}
    assert got.headers == {"content-type": "application/json"}
    assert got.job_type == "charge"
    assert got.status == "pending"
    assert got.received_at == T0
    assert got.expires_at == T0 + timedelta(seconds=TTL)


async def test_a_refused_response_fails_alone_and_the_writer_goes_on(
    store: Store, writer: ResponseWriter
) -> None:
    batches = count_batches(store)
    # correlation_key is NOT NULL: the insert of any batch holding this one raises.
    bad = response(None)  # type: ignore[arg-type]
    news = [response("good-1"), response("good-2"), bad, response("good-3"), response("good-4")]
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(writer.write(new) for new in news), return_exceptions=True), 10
    )
    # They shared a transaction, which failed...
    assert any(None in batch and "good-1" in batch for batch in batches)
    # ...yet only the refused response's caller gets the error; the others are stored.
    assert isinstance(outcomes[2], sqlalchemy.exc.IntegrityError)
    good = {
        new.correlation_key: outcome
        for new, outcome in zip(news, outcomes, strict=True)
        if new is not bad
    }
    assert all(isinstance(outcome, int) for outcome in good.values())
    assert await stored(store) == {rid: key for key, rid in good.items()}

    # The writer is not stuck: a later write is stored.
    response_id = await asyncio.wait_for(writer.write(response("after")), 5)
    assert (await store.response_get(response_id)).correlation_key == "after"


async def test_a_caller_that_gives_up_leaves_its_write_to_complete(
    store: Store, writer: ResponseWriter
) -> None:
    impatient = asyncio.create_task(writer.write(response("gone")))
    others = [asyncio.create_task(writer.write(response(f"stay-{n}"))) for n in range(5)]
    await asyncio.sleep(0)  # every write is accepted
    impatient.cancel()
    ids = await asyncio.wait_for(asyncio.gather(*others), 5)
    await asyncio.wait_for(writer.close(), 5)
    keys = set((await stored(store)).values())
    assert keys == {"gone", *(f"stay-{n}" for n in range(5))}
    assert len(set(ids)) == 5


async def test_close_waits_for_the_writes_accepted(store: Store, writer: ResponseWriter) -> None:
    first = [asyncio.create_task(writer.write(response(f"first-{n}"))) for n in range(50)]
    await asyncio.sleep(0)  # these 50 call write(); the writer starts
    second = [asyncio.create_task(writer.write(response(f"second-{n}"))) for n in range(50)]
    await asyncio.sleep(0)  # these 50 are accepted while the first batch is being written
    tasks = [*first, *second]
    assert not all(task.done() for task in tasks)
    await asyncio.wait_for(writer.close(), 10)
    keys = set((await stored(store)).values())
    assert keys == {f"{wave}-{n}" for wave in ("first", "second") for n in range(50)}
    ids = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert len(set(ids)) == 100


async def test_a_database_that_cannot_be_reached_fails_the_batch_once() -> None:
    # Nothing listens on port 1: every connection attempt is refused.
    store = Store.from_url("postgresql+asyncpg://postgres@127.0.0.1:1/hipq")
    try:
        batches = count_batches(store)
        writer = ResponseWriter(store, lambda: T0, TTL)
        outcomes = await asyncio.wait_for(
            asyncio.gather(
                *(writer.write(response(f"k-{n}")) for n in range(5)), return_exceptions=True
            ),
            10,
        )
        assert all(isinstance(o, OSError | sqlalchemy.exc.OperationalError) for o in outcomes)
        # Not retried row by row: that could not help, and would multiply the wait.
        assert len(batches) == 1
    finally:
        await store.close()
