"""The store conformance suite, inbox half: responses and parked messages, on SQLite
and PostgreSQL. Time is pinned by each test (see test_conformance)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.outcomes import Failed, Succeeded
from hipq.retry import AttemptError
from hipq.store import Conflict, Match, NewResponse, NotFound, ParkedMessage, Store
from hipq.store.wakeup import jobs_payload, responses_payload
from tests.store.test_conformance import T0, TTL, at, claim_due, insert, new, settle_jobs

RESPONSE_TTL = 3600.0


def response(key: str, succeeded: bool = True, **fields: Any) -> NewResponse:
    base: dict[str, Any] = {"correlation_key": key, "source": "webhook", "succeeded": succeeded}
    return NewResponse(**{**base, **fields})


async def receive(store: Store, *new: NewResponse, now: Any = T0) -> list[int]:
    return await store.response_insert_many(list(new), now, RESPONSE_TTL)


async def in_flight(store: Store, key: str, queue: str = "default", **fields: Any) -> Job:
    """A running job holding correlation key ``key``."""
    await insert(store, new(correlation_key=key, queue=queue, **fields))
    [job] = await claim_due(store, queue=queue)
    return job


async def match(
    store: Store, queue: str = "default", signed: tuple[str, ...] = (), now: Any = T0
) -> tuple[list[Match], list[int]]:
    token = await store.lease_acquire(queue, "owner-a", now, TTL)
    assert token is not None
    async with store.queue_batch(queue, "owner-a", token, now, TTL) as batch:
        return await batch.response_match(signed)


async def mark(
    store: Store, matched: list[tuple[int, int]], duplicates: list[int], now: Any = T0
) -> None:
    token = await store.lease_acquire("default", "owner-a", now, TTL)
    assert token is not None
    async with store.queue_batch("default", "owner-a", token, now, TTL) as batch:
        await batch.response_mark(matched, duplicates, now)


async def accept_late(store: Store, types: list[str], now: Any = T0) -> list[int]:
    token = await store.lease_acquire("default", "owner-a", now, TTL)
    assert token is not None
    async with store.queue_batch("default", "owner-a", token, now, TTL) as batch:
        return await batch.response_accept_late(types, now)


async def statuses(store: Store) -> dict[int, str]:
    return {r.id: r.status for r in await store.response_list(limit=1000)}


# -- intake and reads ---------------------------------------------------------------------


async def test_response_round_trip(store: Store) -> None:
    [rid] = await receive(
        store,
        response("k-1", False, reason="declined", body={"status": "no"}, headers={"x": "1"}),
    )
    got = await store.response_get(rid)
    assert (got.correlation_key, got.source, got.succeeded) == ("k-1", "webhook", False)
    assert (got.reason, got.body, got.headers) == ("declined", {"status": "no"}, {"x": "1"})
    assert got.status == "pending" and got.job_id is None and got.settled_at is None
    assert got.received_at == T0
    assert got.expires_at == T0 + timedelta(seconds=RESPONSE_TTL)


async def test_insert_many_returns_ids_in_the_order_given(store: Store) -> None:
    ids = await receive(store, *(response(f"k-{i}") for i in range(5)))
    keys = [(await store.response_get(i)).correlation_key for i in ids]
    assert keys == [f"k-{i}" for i in range(5)]


async def test_unknown_response_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.response_get(404)


async def test_new_responses_wake_every_queue_after_commit(store: Store) -> None:
    heard: list[str] = []
    store.listeners.append(heard.append)
    await receive(store, response("k"))
    await store.job_insert_many([new(queue="other")], T0)
    assert heard == [responses_payload(), jobs_payload("other")]


async def test_response_list_filters_and_pages_newest_first(store: Store) -> None:
    ids = await receive(store, response("a"), response("b"), response("a"))
    job = await in_flight(store, "b")
    await mark(store, [(ids[1], job.id)], [])
    assert [r.id for r in await store.response_list()] == ids[::-1]
    assert [r.id for r in await store.response_list(correlation_key="a")] == [ids[2], ids[0]]
    assert [r.id for r in await store.response_list(statuses=["matched"])] == [ids[1]]
    assert [r.id for r in await store.response_list(statuses=["pending"])] == [ids[2], ids[0]]
    page = await store.response_list(limit=2)
    rest = await store.response_list(after_id=page[-1].id, limit=2)
    assert [r.id for r in page + rest] == ids[::-1]


async def test_parked_messages_are_stored_and_listed_newest_first(store: Store) -> None:
    parked = [
        ParkedMessage("kafka:replies", "no key", partition=0, offset=i, key=None, value="{}")
        for i in range(3)
    ]
    assert await store.response_insert_many([], T0, RESPONSE_TTL, parked) == []
    listed = await store.parked_list()
    assert [p["offset"] for p in listed] == [2, 1, 0]
    assert listed[0]["reason"] == "no key" and listed[0]["source"] == "kafka:replies"
    assert listed[0]["received_at"] == T0
    older = await store.parked_list(after_id=listed[0]["id"], limit=1)
    assert [p["offset"] for p in older] == [1]
    assert await store.response_list() == []


# -- matching in the loop's batch -------------------------------------------------------------


async def test_a_pending_response_matches_its_in_flight_job(store: Store) -> None:
    job = await in_flight(store, "k")
    [rid] = await receive(store, response("k", body={"ok": True}))
    matches, duplicates = await match(store)
    assert [(m.response.id, m.job_id, m.response.body) for m in matches] == [
        (rid, job.id, {"ok": True})
    ]
    assert duplicates == []


async def test_further_responses_for_a_job_are_duplicates(store: Store) -> None:
    job = await in_flight(store, "k")
    first, second, third = await receive(store, response("k"), response("k"), response("k"))
    matches, duplicates = await match(store)
    assert [(m.response.id, m.job_id) for m in matches] == [(first, job.id)]
    assert duplicates == [second, third]


async def test_early_responses_and_other_queues_do_not_match(store: Store) -> None:
    await insert(store, new(correlation_key="early", run_at=at(60)))
    await in_flight(store, "elsewhere", queue="other")
    await receive(store, response("early"), response("elsewhere"), response("nobody"))
    assert await match(store) == ([], [])
    matches, _ = await match(store, queue="other")
    assert [m.response.correlation_key for m in matches] == ["elsewhere"]


async def test_a_signed_type_matches_only_responses_verified_for_it(store: Store) -> None:
    job = await in_flight(store, "k", type="signed")
    unsigned, signed = await receive(store, response("k"), response("k", job_type="signed"))
    matches, duplicates = await match(store, signed=("signed",))
    assert [(m.response.id, m.job_id) for m in matches] == [(signed, job.id)]
    assert duplicates == []
    assert (await store.response_get(unsigned)).status == "pending"


async def test_mark_settles_matches_and_duplicates_once(store: Store) -> None:
    job = await in_flight(store, "k")
    first, second = await receive(store, response("k"), response("k"))
    await mark(store, [(first, job.id)], [second], now=at(5))
    got = await store.response_get(first)
    assert (got.status, got.job_id, got.settled_at) == ("matched", job.id, at(5))
    dup = await store.response_get(second)
    assert (dup.status, dup.job_id, dup.settled_at) == ("duplicate", None, at(5))
    # Already settled: a second mark (a stale batch) changes nothing.
    await mark(store, [(second, job.id)], [first], now=at(9))
    assert await store.response_get(first) == got
    assert await store.response_get(second) == dup
    assert await match(store) == ([], [])


# -- an operator's match by hand ---------------------------------------------------------------


async def test_force_match_pairs_a_response_with_any_in_flight_job(store: Store) -> None:
    job = await in_flight(store, "k")
    [rid] = await receive(store, response("typo"))
    forced = await store.response_force_match(rid, job.id, at(1))
    assert (forced.status, forced.forced_job_id) == ("pending", job.id)
    assert forced.expires_at >= at(1) + timedelta(hours=1)
    matches, _ = await match(store)
    assert [(m.response.id, m.job_id) for m in matches] == [(rid, job.id)]


async def test_force_match_reopens_an_expired_response(store: Store) -> None:
    [rid] = await receive(store, response("lost"))
    assert await store.response_classify(at(RESPONSE_TTL)) == {
        "duplicate": 0,
        "late": 0,
        "expired": 1,
    }
    job = await in_flight(store, "k")
    later = at(RESPONSE_TTL + 10)
    forced = await store.response_force_match(rid, job.id, later)
    assert forced.status == "pending"
    assert forced.expires_at == later + timedelta(hours=1)


async def test_force_match_refusals(store: Store) -> None:
    job = await in_flight(store, "k")
    [scheduled] = await insert(store, new(run_at=at(60)))
    first, second = await receive(store, response("k"), response("x"))
    await mark(store, [(first, job.id)], [])
    with pytest.raises(NotFound):
        await store.response_force_match(9999, job.id, T0)
    with pytest.raises(NotFound):
        await store.response_force_match(second, 9999, T0)
    with pytest.raises(Conflict):
        await store.response_force_match(first, job.id, T0)  # already matched
    with pytest.raises(Conflict):
        await store.response_force_match(second, scheduled.id, T0)  # not in flight
    assert (await store.response_get(second)).forced_job_id is None


# -- upkeep: classification and pruning ---------------------------------------------------------


async def test_classify_keeps_early_and_unknown_responses_until_their_ttl(store: Store) -> None:
    await insert(store, new(correlation_key="early", run_at=at(60)))
    early, unknown = await receive(store, response("early"), response("nobody"))
    counts = await store.response_classify(at(RESPONSE_TTL - 1))
    assert counts == {"duplicate": 0, "late": 0, "expired": 0}
    assert await statuses(store) == {early: "pending", unknown: "pending"}
    counts = await store.response_classify(at(RESPONSE_TTL))
    assert counts == {"duplicate": 0, "late": 0, "expired": 1}
    assert await statuses(store) == {early: "pending", unknown: "expired"}
    assert (await store.response_get(unknown)).settled_at == at(RESPONSE_TTL)


async def test_classify_leaves_a_response_for_an_in_flight_job_to_the_loop(store: Store) -> None:
    await in_flight(store, "k")
    [rid] = await receive(store, response("k"))
    assert await store.response_classify(at(RESPONSE_TTL + 1)) == {
        "duplicate": 0,
        "late": 0,
        "expired": 0,
    }
    assert (await store.response_get(rid)).status == "pending"


async def test_classify_marks_a_response_for_a_finished_job_late(store: Store) -> None:
    job = await in_flight(store, "k")
    await settle_jobs(store, [(job, Failed(AttemptError("timeout", retryable=False)))], at(1))
    [rid] = await receive(store, response("k"), now=at(2))
    assert await store.response_classify(at(3)) == {"duplicate": 0, "late": 1, "expired": 0}
    got = await store.response_get(rid)
    assert (got.status, got.job_id, got.settled_at) == ("late", job.id, at(3))


async def test_classify_marks_a_second_response_for_a_matched_job_duplicate(
    store: Store,
) -> None:
    job = await in_flight(store, "k")
    [first] = await receive(store, response("k"))
    await mark(store, [(first, job.id)], [])
    await settle_jobs(store, [(job, Succeeded({"ok": 1}))], at(1))
    [again] = await receive(store, response("k"), now=at(2))
    assert await store.response_classify(at(3)) == {"duplicate": 1, "late": 0, "expired": 0}
    got = await store.response_get(again)
    assert (got.status, got.job_id) == ("duplicate", job.id)
    assert (await store.response_get(first)).status == "matched"


async def test_prune_deletes_settled_rows_and_parked_messages_before_the_cutoff(
    store: Store,
) -> None:
    old_settled, old_pending = await receive(store, response("a"), response("b"))
    await store.response_classify(at(RESPONSE_TTL))  # both expire...
    [new_pending] = await receive(store, response("c"), now=at(RESPONSE_TTL))
    job = await in_flight(store, "b")
    await store.response_force_match(old_pending, job.id, at(RESPONSE_TTL))  # ...one reopens
    parked = ParkedMessage("kafka:replies", "bad json", partition=0, offset=1, value="{")
    await store.response_insert_many([], T0, RESPONSE_TTL, [parked])
    await store.response_insert_many([], at(RESPONSE_TTL), RESPONSE_TTL, [parked])
    assert await store.response_prune(at(RESPONSE_TTL)) == 1
    assert await statuses(store) == {old_pending: "pending", new_pending: "pending"}
    assert [p["received_at"] for p in await store.parked_list()] == [at(RESPONSE_TTL)]
    assert old_settled not in await statuses(store)


# -- late responses a job type accepts -------------------------------------------------------------


async def late_response(store: Store, succeeded: bool = True, **fields: Any) -> tuple[Job, int]:
    """A job that failed, and its response that came after: classified late."""
    job = await in_flight(store, "k", **fields)
    await settle_jobs(store, [(job, Failed(AttemptError("timeout", retryable=False)))], at(1))
    [rid] = await receive(store, response("k", succeeded, body={"done": True}), now=at(2))
    await store.response_classify(at(3))
    assert (await store.response_get(rid)).status == "late"
    return job, rid


async def test_accept_late_completes_a_failed_job_with_its_late_success(store: Store) -> None:
    job, rid = await late_response(store, type="lenient")
    assert await accept_late(store, ["lenient"], at(4)) == [job.id]
    done = await store.job_get(job.id)
    assert (done.state, done.result, done.finished_at, done.last_error) == (
        State.COMPLETED,
        {"done": True},
        at(4),
        None,
    )
    last = (await store.job_attempts(job.id))[-1]
    assert (last.outcome, last.error, last.response) == (
        "completed",
        "late response accepted",
        {"done": True},
    )
    got = await store.response_get(rid)
    assert (got.status, got.settled_at) == ("matched", at(4))
    assert await accept_late(store, ["lenient"], at(5)) == []


async def test_accept_late_leaves_other_types_and_failures_alone(store: Store) -> None:
    job, rid = await late_response(store, type="strict")
    assert await accept_late(store, ["lenient"], at(4)) == []
    assert (await store.job_get(job.id)).state == State.FAILED
    assert (await store.response_get(rid)).status == "late"


async def test_accept_late_ignores_a_late_failure(store: Store) -> None:
    job, rid = await late_response(store, succeeded=False, type="lenient")
    assert await accept_late(store, ["lenient"], at(4)) == []
    assert (await store.job_get(job.id)).state == State.FAILED
    assert (await store.response_get(rid)).status == "late"


@pytest.mark.parametrize("body", [{"status": "ok", "n": [1, None]}, "text", 5, None])
async def test_a_lone_response_is_stored_as_one_with_parked_messages_is(
    store: Store, body: Any
) -> None:
    # Responses alone take each engine's one-statement path on the driver connection;
    # with parked messages they share the SQLAlchemy transaction: stored alike.
    fields: dict[str, Any] = {
        "body": body,
        "headers": {"x-id": "7"},
        "reason": "fine",
        "job_type": "charge",
        "fingerprint": "f" * 16,
    }
    (alone,) = await store.response_insert_many([response("k", **fields)], T0, RESPONSE_TTL)
    parked = ParkedMessage("kafka:replies", "no key", partition=0, offset=1, value="{}")
    (beside,) = await store.response_insert_many(
        [response("k", **fields)], T0, RESPONSE_TTL, [parked]
    )
    assert beside > alone
    first, second = await store.response_get(alone), await store.response_get(beside)
    assert first.body == body and first.headers == {"x-id": "7"}
    assert first.received_at == T0 and first.expires_at == T0 + timedelta(seconds=RESPONSE_TTL)
    async with store.engine.connect() as conn:
        rows = (
            await conn.execute(
                text("SELECT * FROM hipq_responses WHERE id IN (:a, :b) ORDER BY id"),
                {"a": alone, "b": beside},
            )
        ).all()
    stored = [{**r._mapping, "id": None} for r in rows]
    assert stored[0] == stored[1]
    assert first == replace(second, id=alone)
