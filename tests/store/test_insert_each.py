"""``Store.job_insert_each``: several independent requests in one transaction (the
group commit of single-job POSTs), on both engines."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from hipq.jobs import NewJob
from hipq.store import Conflict, InsertResult, JobFilter, Store

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def new(**fields: Any) -> NewJob:
    base: dict[str, Any] = {"type": "ok", "queue": "default", "payload": {}, "run_at": T0}
    return NewJob(**{**base, **fields})


def ok(result: InsertResult | Conflict) -> InsertResult:
    assert isinstance(result, InsertResult), result
    return result


async def test_each_request_gets_its_own_jobs(store: Store) -> None:
    results = await store.job_insert_each(
        [([new(payload={"i": i})], None) for i in range(5)] + [([new(), new()], None)], T0
    )
    ids = [j.id for r in results for j in ok(r).jobs]
    assert len(ids) == len(set(ids)) == 7
    assert [j.payload for r in results[:5] for j in ok(r).jobs] == [{"i": i} for i in range(5)]
    assert len(await store.job_list(JobFilter())) == 7


async def test_a_refused_request_does_not_fail_its_neighbours(store: Store) -> None:
    ok((await store.job_insert_each([([new(correlation_key="held")], None)], T0))[0])
    results = await store.job_insert_each(
        [
            ([new(payload={"i": 1})], None),
            ([new(correlation_key="held")], None),
            ([new(payload={"i": 3})], None),
            ([new(correlation_key="c-4"), new(correlation_key="c-4")], None),  # all or none
            ([new(payload={"i": 5})], None),
        ],
        T0,
    )
    assert [type(r).__name__ for r in results] == [
        "InsertResult",
        "Conflict",
        "InsertResult",
        "Conflict",
        "InsertResult",
    ]
    conflict = results[1]
    assert isinstance(conflict, Conflict) and conflict.field == "correlation_key"
    assert [ok(results[i]).jobs[0].payload for i in (0, 2, 4)] == [{"i": 1}, {"i": 3}, {"i": 5}]
    assert len(await store.job_list(JobFilter())) == 4


async def test_idempotency_and_job_keys_inside_one_group(store: Store) -> None:
    results = await store.job_insert_each(
        [
            ([new(payload={"n": 1})], ("idem-1", "hash-a")),
            ([new(payload={"n": 1})], ("idem-1", "hash-a")),  # the replay of the first
            ([new(payload={"n": 2})], ("idem-1", "hash-b")),  # same key, other request
            ([new(job_key="k", payload={"v": 1})], None),
            ([new(job_key="k", payload={"v": 2})], None),  # replaces the scheduled one
            ([new(payload={"plain": True})], None),
        ],
        T0,
    )
    first, replay = ok(results[0]), ok(results[1])
    assert not first.replayed and replay.replayed
    assert [j.id for j in replay.jobs] == [j.id for j in first.jobs]
    refused = results[2]
    assert isinstance(refused, Conflict) and refused.field == "Idempotency-Key"
    keyed_a, keyed_b = ok(results[3]).jobs[0], ok(results[4]).jobs[0]
    assert keyed_a.id == keyed_b.id and keyed_b.payload == {"v": 2}
    assert ok(results[5]).jobs[0].payload == {"plain": True}
    assert len(await store.job_list(JobFilter())) == 3
    # A key claimed inside the group is kept once the group committed.
    again = await store.job_insert_many([new(payload={"n": 1})], T0, ("idem-1", "hash-a"))
    assert again.replayed and [j.id for j in again.jobs] == [j.id for j in first.jobs]


async def test_a_lone_refused_request_is_a_conflict(store: Store) -> None:
    ok((await store.job_insert_each([([new(correlation_key="x")], None)], T0))[0])
    [result] = await store.job_insert_each([([new(correlation_key="x")], None)], T0)
    assert isinstance(result, Conflict) and result.field == "correlation_key"


async def test_a_plain_group_stores_every_field_as_a_transaction_does(store: Store) -> None:
    # Plain requests take each engine's one-statement path on the driver connection;
    # keyed ones the SQLAlchemy transaction: both must store and read back the same.
    fields: dict[str, Any] = {
        "payload": {"n": 1, "nested": {"list": [1, "two", None]}, "text": "é\u00e9"},
        "run_at": datetime(2026, 1, 5, 12, 0, 0, 123456, tzinfo=UTC),
        "priority": 7,
        "weight": 3,
        "labels": {"region": "eu"},
        "windows": [{"days": "mon-fri", "from": "09:00", "to": "17:00"}],
        "timeout_seconds": 12.5,
        "retry": {"strategy": "fixed", "delay": "2s", "max_attempts": 4},
        "critical": True,
        "trace_context": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "flags": ["bulk"],
        "notify": ["ops"],
    }
    plain = ok((await store.job_insert_each([([new(**fields)], None)], T0))[0]).jobs[0]
    keyed = ok((await store.job_insert_each([([new(**fields)], ("k-1", "h"))], T0))[0]).jobs[0]
    read_plain, read_keyed = await store.job_get(plain.id), await store.job_get(keyed.id)
    assert read_plain == plain
    assert read_plain._replace(id=keyed.id) == read_keyed
    assert (await store.job_get(plain.id)).run_at == fields["run_at"]
    assert read_plain.windows is not None and read_plain.notify == ["ops"]
    # Stored alike, not only read back alike: the SQL compares run_at as stored.
    async with store.engine.connect() as conn:
        stored = (
            await conn.execute(
                text("SELECT * FROM hipq_jobs WHERE id IN (:a, :b) ORDER BY id"),
                {"a": plain.id, "b": keyed.id},
            )
        ).all()
    first, second = (dict(r._mapping) for r in stored)
    assert {**first, "id": None, "job_key": None} == {**second, "id": None, "job_key": None}
