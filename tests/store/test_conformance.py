"""The store conformance suite: every test runs against SQLite and PostgreSQL.

Time is a parameter: each test pins ``now`` and moves it by hand, so lease expiry and
due times are exact instead of slept for.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hipq.jobs import Job, NewJob
from hipq.lifecycle import State
from hipq.outcomes import Cancelled, Failed, Succeeded, settle
from hipq.retry import AttemptError, Fixed, FixedSettings
from hipq.store import Conflict, JobFilter, LeaseLost, NotFound, Store
from hipq.store.heartbeats import heartbeat_take

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
TTL = 30.0
RETRY = Fixed(FixedSettings(strategy="fixed", delay=10, max_attempts=3))


def new(**fields: Any) -> NewJob:
    base: dict[str, Any] = {"type": "ok", "queue": "default", "payload": {}, "run_at": T0}
    return NewJob(**{**base, **fields})


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def insert(store: Store, *jobs: NewJob, now: datetime = T0) -> list[Job]:
    return (await store.job_insert_many(list(jobs), now)).jobs


async def all_jobs(store: Store) -> list[Job]:
    return await store.job_list(JobFilter(limit=10_000))


async def claim_due(
    store: Store, now: datetime = T0, owner: str = "owner-a", queue: str = "default"
) -> list[Job]:
    """Take the lease (if needed) and claim every due job of ``queue``, as one loop tick would."""
    token = await store.lease_acquire(queue, owner, now, TTL)
    assert token is not None
    async with store.queue_batch(queue, owner, token, now, TTL) as batch:
        due = await batch.job_due(now, 1000, "time_priority")
        return await batch.job_claim(due, now)


async def settle_jobs(
    store: Store, outcomes: list[tuple[Job, Any]], now: datetime, owner: str = "owner-a"
) -> None:
    token = await store.lease_acquire("default", owner, now, TTL)
    assert token is not None
    async with store.queue_batch("default", owner, token, now, TTL) as batch:
        await batch.job_settle([settle(job, outcome, RETRY, now) for job, outcome in outcomes], now)


async def failed_job(store: Store, **fields: Any) -> Job:
    [job] = await insert(store, new(**fields))
    [running] = await claim_due(store)
    await settle_jobs(store, [(running, Failed(AttemptError("boom", retryable=False)))], T0)
    failed = await store.job_get(job.id)
    assert failed.state == State.FAILED
    return failed


# -- inserting ------------------------------------------------------------------------


async def test_insert_and_get_round_trip(store: Store) -> None:
    made = await insert(
        store,
        new(
            payload={"n": 1},
            labels={"region": "east"},
            priority=5,
            weight=3,
            critical=True,
            windows=[{"start": "05:00", "end": "07:00", "tz": "UTC"}],
            timeout_seconds=90.5,
            retry={"strategy": "fixed", "delay": 5.0},
            correlation_key="c-1",
        ),
        new(payload={"n": 2}),
    )
    assert [j.payload for j in made] == [{"n": 1}, {"n": 2}]
    assert made[0].id < made[1].id
    for job in made:
        assert await store.job_get(job.id) == job
    first = made[0]
    assert (first.state, first.attempt, first.run_at, first.created_at) == (
        State.SCHEDULED,
        0,
        T0,
        T0,
    )
    assert (first.weight, first.priority, first.critical) == (3, 5, True)
    assert first.timeout_seconds == 90.5


async def test_get_unknown_job_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.job_get(12345)


async def test_insert_many_is_all_or_none_on_duplicate_key_inside_the_batch(store: Store) -> None:
    batch = [new(correlation_key=f"k{i}") for i in range(5)]
    batch.insert(3, new(correlation_key="k1"))
    with pytest.raises(Conflict) as err:
        await insert(store, *batch)
    assert err.value.field == "correlation_key"
    assert "correlation_key" in err.value.message
    assert await all_jobs(store) == []


async def test_insert_many_is_all_or_none_against_an_open_job(store: Store) -> None:
    [held] = await insert(store, new(correlation_key="taken"))
    with pytest.raises(Conflict) as err:
        await insert(store, new(), new(correlation_key="taken"), new(), new(job_key="jk"))
    assert err.value.field == "correlation_key"
    assert [j.id for j in await all_jobs(store)] == [held.id]


async def test_correlation_key_is_free_again_once_the_job_is_terminal(store: Store) -> None:
    [first] = await insert(store, new(correlation_key="k"))
    await store.job_cancel(first.id, T0)
    [second] = await insert(store, new(correlation_key="k"))
    assert second.id != first.id


async def test_idempotency_key_replays_the_first_request(store: Store) -> None:
    first = await store.job_insert_many([new(), new()], T0, idempotency=("idem-1", "hash-a"))
    again = await store.job_insert_many([new(), new()], at(5), idempotency=("idem-1", "hash-a"))
    assert not first.replayed and again.replayed
    assert again.jobs == first.jobs
    assert len(await all_jobs(store)) == 2


async def test_idempotency_key_with_a_different_body_is_a_conflict(store: Store) -> None:
    await store.job_insert_many([new()], T0, idempotency=("idem-1", "hash-a"))
    with pytest.raises(Conflict) as err:
        await store.job_insert_many([new(), new()], T0, idempotency=("idem-1", "hash-b"))
    assert err.value.field == "Idempotency-Key"
    assert len(await all_jobs(store)) == 1


async def test_a_refused_batch_does_not_burn_its_idempotency_key(store: Store) -> None:
    await insert(store, new(correlation_key="taken"))
    with pytest.raises(Conflict):
        await store.job_insert_many(
            [new(correlation_key="taken")], T0, idempotency=("idem-1", "hash-a")
        )
    result = await store.job_insert_many([new()], T0, idempotency=("idem-1", "hash-a"))
    assert not result.replayed and len(result.jobs) == 1


# -- job_key modes (graphile-worker semantics) ------------------------------------------


async def test_job_key_replace_updates_the_scheduled_job_including_run_at(store: Store) -> None:
    [first] = await insert(store, new(job_key="jk", payload={"v": 1}, run_at=at(60), priority=5))
    [second] = await insert(
        store, new(job_key="jk", payload={"v": 2}, run_at=at(120), priority=7, weight=2), now=at(1)
    )
    assert second.id == first.id
    stored = await store.job_get(first.id)
    assert (stored.payload, stored.run_at) == ({"v": 2}, at(120))
    assert (stored.priority, stored.weight) == (7, 2)
    assert stored.updated_at == at(1) and stored.created_at == T0
    assert len(await all_jobs(store)) == 1


async def test_job_key_preserve_run_at_keeps_the_run_at(store: Store) -> None:
    [first] = await insert(store, new(job_key="jk", payload={"v": 1}, run_at=at(60)))
    [second] = await insert(
        store, new(job_key="jk", job_key_mode="preserve_run_at", payload={"v": 2}, run_at=at(999))
    )
    assert second.id == first.id
    stored = await store.job_get(first.id)
    assert (stored.payload, stored.run_at) == ({"v": 2}, at(60))
    assert len(await all_jobs(store)) == 1


async def test_job_key_unsafe_dedupe_returns_the_existing_job_unchanged(store: Store) -> None:
    [first] = await insert(store, new(job_key="jk", payload={"v": 1}, run_at=at(60)))
    [second] = await insert(
        store, new(job_key="jk", job_key_mode="unsafe_dedupe", payload={"v": 2}, run_at=at(5))
    )
    assert second == first
    assert await store.job_get(first.id) == first
    assert len(await all_jobs(store)) == 1


async def test_same_job_key_twice_in_one_batch_leaves_one_job(store: Store) -> None:
    made = await insert(
        store, new(job_key="jk", payload={"v": 1}), new(job_key="jk", payload={"v": 2})
    )
    assert made[0].id == made[1].id
    [only] = await all_jobs(store)
    assert only.payload == {"v": 2}


@pytest.mark.parametrize("mode", ["replace", "preserve_run_at"])
async def test_job_key_held_by_a_running_job_schedules_a_new_job(store: Store, mode: str) -> None:
    [first] = await insert(store, new(job_key="jk", payload={"v": 1}))
    [running] = await claim_due(store)
    [second] = await insert(
        store, new(job_key="jk", job_key_mode=mode, payload={"v": 2}, run_at=at(30)), now=at(1)
    )
    assert second.id != first.id
    # The running job lets go of the key and keeps running; the new one runs on its own run_at.
    old = await store.job_get(first.id)
    assert (old.state, old.job_key, old.payload) == (State.RUNNING, None, {"v": 1})
    fresh = await store.job_get(second.id)
    assert (fresh.state, fresh.job_key, fresh.run_at) == (State.SCHEDULED, "jk", at(30))
    # The key now belongs to the new job: a third insert replaces that one.
    [third] = await insert(store, new(job_key="jk", payload={"v": 3}))
    assert third.id == second.id
    assert running.id == first.id


async def test_job_key_unsafe_dedupe_against_a_running_job(store: Store) -> None:
    await insert(store, new(job_key="jk", payload={"v": 1}))
    [running] = await claim_due(store)
    [same] = await insert(store, new(job_key="jk", job_key_mode="unsafe_dedupe", payload={"v": 2}))
    assert same.id == running.id and same.state == State.RUNNING
    assert len(await all_jobs(store)) == 1


async def test_job_key_of_a_finished_job_is_free(store: Store) -> None:
    [first] = await insert(store, new(job_key="jk"))
    [running] = await claim_due(store)
    await settle_jobs(store, [(running, Succeeded({"ok": True}))], at(1))
    [second] = await insert(store, new(job_key="jk", job_key_mode="unsafe_dedupe"), now=at(2))
    assert second.id != first.id
    assert (await store.job_get(first.id)).state == State.COMPLETED


# -- API edits ------------------------------------------------------------------------


async def test_cancel_scheduled_job(store: Store) -> None:
    [job] = await insert(store, new())
    cancelled = await store.job_cancel(job.id, at(3))
    assert (cancelled.state, cancelled.finished_at) == (State.CANCELLED, at(3))
    assert await store.job_get(job.id) == cancelled


async def test_cancel_running_job_asks_the_loop(store: Store) -> None:
    [job] = await insert(store, new())
    await claim_due(store)
    asked = await store.job_cancel(job.id, at(3))
    assert (asked.state, asked.cancel_requested) == (State.RUNNING, True)
    token = await store.lease_acquire("default", "owner-a", at(3), TTL)
    assert token is not None
    async with store.queue_batch("default", "owner-a", token, at(3), TTL) as batch:
        assert await batch.job_cancel_requests() == [job.id]


async def test_cancel_terminal_job_is_a_conflict_and_unknown_is_not_found(store: Store) -> None:
    [job] = await insert(store, new())
    await store.job_cancel(job.id, T0)
    with pytest.raises(Conflict) as err:
        await store.job_cancel(job.id, T0)
    assert err.value.field == "state"
    with pytest.raises(NotFound):
        await store.job_cancel(job.id + 100, T0)


async def test_update_pending_changes_a_scheduled_job(store: Store) -> None:
    [job] = await insert(store, new(payload={"v": 1}))
    changed = await store.job_update_pending(
        job.id, {"payload": {"v": 2}, "run_at": at(60), "priority": 1, "weight": 4}, at(1)
    )
    assert (changed.payload, changed.run_at, changed.priority, changed.weight) == (
        {"v": 2},
        at(60),
        1,
        4,
    )
    assert await store.job_get(job.id) == changed


async def test_update_pending_refuses_other_states_fields_and_ids(store: Store) -> None:
    [job] = await insert(store, new())
    with pytest.raises(Conflict) as err:
        await store.job_update_pending(job.id, {"state": "completed"}, T0)
    assert err.value.field == "state"
    with pytest.raises(Conflict):
        await store.job_update_pending(job.id, {"queue": "other"}, T0)
    await claim_due(store)
    with pytest.raises(Conflict) as err:
        await store.job_update_pending(job.id, {"priority": 1}, T0)
    assert "scheduled" in err.value.message
    assert (await store.job_get(job.id)).priority == 100
    with pytest.raises(NotFound):
        await store.job_update_pending(job.id + 100, {"priority": 1}, T0)


async def test_retry_a_failed_job(store: Store) -> None:
    job = await failed_job(store, payload={"v": 1})
    again = await store.job_retry(job.id, at(5), run_at=at(50))
    assert (again.state, again.run_at, again.finished_at, again.attempt) == (
        State.SCHEDULED,
        at(50),
        None,
        1,
    )
    # The next claim is a new attempt.
    [claimed] = await claim_due(store, now=at(50))
    assert claimed.attempt == 2


async def test_retry_a_cancelled_job_defaults_to_now(store: Store) -> None:
    [job] = await insert(store, new())
    await store.job_cancel(job.id, T0)
    again = await store.job_retry(job.id, at(7))
    assert (again.state, again.run_at) == (State.SCHEDULED, at(7))


async def test_retry_refuses_open_and_completed_jobs(store: Store) -> None:
    [scheduled, done] = await insert(store, new(), new(run_at=at(-1)))
    with pytest.raises(Conflict):
        await store.job_retry(scheduled.id, T0)
    [first, second] = await claim_due(store)
    await settle_jobs(store, [(second, Succeeded())], T0)
    with pytest.raises(Conflict):
        await store.job_retry(first.id, T0)
    with pytest.raises(Conflict) as err:
        await store.job_retry(done.id, T0)
    assert err.value.field == "state"
    with pytest.raises(NotFound):
        await store.job_retry(done.id + 100, T0)


async def test_retry_refuses_when_its_correlation_key_was_reused(store: Store) -> None:
    job = await failed_job(store, correlation_key="k")
    await insert(store, new(correlation_key="k"))
    with pytest.raises(Conflict) as err:
        await store.job_retry(job.id, T0)
    assert err.value.field == "correlation_key"
    assert (await store.job_get(job.id)).state == State.FAILED


# -- listing ----------------------------------------------------------------------------


async def test_list_filters(store: Store) -> None:
    made = await insert(
        store,
        new(type="ok", labels={"region": "east"}),
        new(type="fail", labels={"region": "west"}),
        new(type="ok", queue="other", labels={"region": "east", "tier": "gold"}),
        new(type="ok", labels={"tier": "gold"}),
    )
    await store.job_cancel(made[3].id, T0)

    async def ids(**flt: Any) -> list[int]:
        return [j.id for j in await store.job_list(JobFilter(**flt))]

    a, b, c, d = (j.id for j in made)
    assert await ids() == [d, c, b, a]  # newest first
    assert await ids(queue="other") == [c]
    assert await ids(states=("cancelled",)) == [d]
    assert await ids(states=("scheduled", "cancelled"), queue="default") == [d, b, a]
    assert await ids(type="fail") == [b]
    assert await ids(labels={"region": "east"}) == [c, a]
    assert await ids(labels={"region": "east", "tier": "gold"}) == [c]
    assert await ids(labels={"region": "north"}) == []
    assert await ids(type="ok", labels={"tier": "gold"}, states=("scheduled",)) == [c]


async def test_cursor_paging_visits_every_job_exactly_once(store: Store) -> None:
    made = await insert(store, *[new(payload={"i": i}) for i in range(23)])
    await insert(store, *[new(queue="other") for _ in range(4)])
    seen: list[int] = []
    cursor: int | None = None
    pages = 0
    while True:
        page = await store.job_list(JobFilter(queue="default", after_id=cursor, limit=5))
        if not page:
            break
        pages += 1
        seen.extend(j.id for j in page)
        cursor = page[-1].id
    assert pages == 5
    assert sorted(seen) == sorted(j.id for j in made)
    assert len(seen) == len(set(seen))


# -- queues and leases ------------------------------------------------------------------


async def test_queue_counts(store: Store) -> None:
    await insert(
        store,
        new(weight=2),
        new(weight=3),
        new(weight=4),  # claimed below
        new(run_at=at(60)),  # scheduled, not due
        new(),
        new(queue="other"),
    )
    owner_now = T0
    token = await store.lease_acquire("default", "owner-a", owner_now, TTL)
    assert token is not None
    async with store.queue_batch("default", "owner-a", token, T0, TTL) as batch:
        due = await batch.job_due(T0, 3, "time_priority")
        claimed = await batch.job_claim(due, T0)
        await batch.job_mark_awaiting([(claimed[2].id, claimed[2].attempt)], T0)
    await settle_jobs(store, [(claimed[0], Failed(AttemptError("no", retryable=False)))], T0)
    counts = await store.queue_counts("default", T0)
    assert (counts.scheduled, counts.due, counts.running, counts.awaiting, counts.failed) == (
        2,
        1,
        1,
        1,
        1,
    )
    assert counts.weight_in_flight == 3 + 4
    assert (counts.paused, counts.lease_owner) == (False, "owner-a")
    # Past the lease's expiry nobody owns the queue.
    assert (await store.queue_counts("default", at(TTL + 1))).lease_owner is None
    other = await store.queue_counts("other", T0)
    assert (other.scheduled, other.due, other.running, other.lease_owner) == (1, 1, 0, None)


async def test_lease_is_exclusive_until_it_expires(store: Store) -> None:
    first = await store.lease_acquire("default", "a", T0, TTL)
    assert first is not None
    assert await store.lease_acquire("default", "b", at(TTL - 1), TTL) is None
    # The fence renews the lease: b still cannot take it at the old expiry.
    async with store.queue_batch("default", "a", first, at(TTL - 1), TTL):
        pass
    assert await store.lease_acquire("default", "b", at(TTL + 1), TTL) is None
    taken = await store.lease_acquire("default", "b", at(2 * TTL), TTL)
    assert taken is not None and taken > first
    assert (await store.queue_counts("default", at(2 * TTL))).lease_owner == "b"


async def test_stale_owner_writes_nothing(store: Store) -> None:
    [job] = await insert(store, new())
    stale = await store.lease_acquire("default", "a", T0, TTL)
    assert stale is not None
    taken = await store.lease_acquire("default", "b", at(TTL + 1), TTL)
    assert taken is not None
    with pytest.raises(LeaseLost):
        async with store.queue_batch("default", "a", stale, at(TTL + 1), TTL) as batch:
            await batch.job_claim(
                await batch.job_due(at(TTL + 1), 10, "time_priority"), at(TTL + 1)
            )
    assert (await store.job_get(job.id)).state == State.SCHEDULED
    # A token from before the owner's own re-acquisition is stale as well.
    with pytest.raises(LeaseLost):
        async with store.queue_batch("default", "b", taken - 1, at(TTL + 1), TTL):
            pass
    # The takeover did not extend a's lease: b keeps the queue.
    assert (await store.queue_counts("default", at(TTL + 2))).lease_owner == "b"


async def test_a_fence_sent_later_still_keeps_a_stale_owner_out(store: Store) -> None:
    """The fence may go with the tick's due scan or settle (``fence_later``): a stale
    token then raises there, and nothing of the tick is written."""
    [running, waiting] = await insert(store, new(), new(run_at=at(1)))
    [claimed] = await claim_due(store, owner="a")
    assert claimed.id == running.id
    stale = await store.lease_acquire("default", "a", T0, TTL)
    assert stale is not None
    taken = await store.lease_acquire("default", "b", at(TTL + 1), TTL)
    assert taken is not None
    now = at(TTL + 1)
    with pytest.raises(LeaseLost):
        async with store.queue_batch("default", "a", stale, now, TTL, fence_later=True) as b:
            await b.job_settle([settle(claimed, Succeeded({"ok": 1}), RETRY, now)], now)
    with pytest.raises(LeaseLost):
        async with store.queue_batch("default", "a", stale, now, TTL, fence_later=True) as b:
            await b.job_claim(await b.job_due(now, 10, "time_priority"), now)
    assert (await store.job_get(running.id)).state == State.RUNNING
    assert (await store.job_get(waiting.id)).state == State.SCHEDULED
    assert await store.job_attempts(running.id) == []
    assert (await store.queue_counts("default", at(TTL + 2))).lease_owner == "b"


async def test_a_fence_sent_later_renews_the_lease_and_reads_pause(store: Store) -> None:
    [job] = await insert(store, new())
    token = await store.lease_acquire("default", "a", T0, TTL)
    assert token is not None
    await store.queue_set_paused("default", True)
    # With the fence on the due scan a paused queue reads nothing, and says so.
    async with store.queue_batch("default", "a", token, at(1), TTL, fence_later=True) as batch:
        due = await batch.job_due(at(1), 10, "time_priority")
        assert batch.paused
        assert due == []
    await store.queue_set_paused("default", False)
    # A tick that sends nothing sends the fence at its end: the lease is renewed.
    async with store.queue_batch("default", "a", token, at(TTL - 1), TTL, fence_later=True):
        pass
    assert await store.lease_acquire("default", "b", at(TTL + 1), TTL) is None
    async with store.queue_batch("default", "a", token, at(2), TTL, fence_later=True) as batch:
        [read] = await batch.job_due(at(2), 10, "time_priority")
        assert (read.id, batch.paused) == (job.id, False)
        assert batch.knows_next_run_at(at(2))  # read with the due scan
        assert await batch.job_next_run_at(at(2)) is None


async def test_lease_release_frees_the_queue_only_for_the_current_token(store: Store) -> None:
    token = await store.lease_acquire("default", "a", T0, TTL)
    assert token is not None
    await store.lease_release("default", "a", token - 1)
    assert await store.lease_acquire("default", "b", T0, TTL) is None
    await store.lease_release("default", "a", token)
    assert await store.lease_acquire("default", "b", T0, TTL) is not None


async def test_paused_flag(store: Store) -> None:
    await store.queue_set_paused("default", True)
    counts = await store.queue_counts("default", T0)
    assert counts.paused
    token = await store.lease_acquire("default", "a", T0, TTL)
    assert token is not None
    async with store.queue_batch("default", "a", token, T0, TTL) as batch:
        assert batch.paused
    await store.queue_set_paused("default", False)
    async with store.queue_batch("default", "a", token, T0, TTL) as batch:
        assert not batch.paused
    assert not (await store.queue_counts("default", T0)).paused


# -- the loop's batch -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "expected"),
    [("time_priority", ["a", "b", "c"]), ("priority_time", ["c", "a", "b"])],
)
async def test_due_order(store: Store, order: str, expected: list[str]) -> None:
    await insert(
        store,
        new(payload={"n": "c"}, run_at=at(-5), priority=1),
        new(payload={"n": "b"}, run_at=at(-10), priority=300),
        new(payload={"n": "a"}, run_at=at(-10), priority=200),
        new(payload={"n": "not due"}, run_at=at(1), priority=0),
    )
    token = await store.lease_acquire("default", "a", T0, TTL)
    assert token is not None
    async with store.queue_batch("default", "a", token, T0, TTL) as batch:
        assert [j.payload["n"] for j in await batch.job_due(T0, 10, order)] == expected
        assert [j.payload["n"] for j in await batch.job_due(T0, 2, order)] == expected[:2]


async def test_claim_settle_and_attempt_records(store: Store) -> None:
    [job] = await insert(store, new(timeout_seconds=30))
    [claimed] = await claim_due(store)
    assert (claimed.state, claimed.attempt, claimed.claimed_at, claimed.deadline) == (
        State.RUNNING,
        1,
        T0,
        at(30),
    )
    assert await store.job_get(job.id) == claimed
    assert [j.id for j in await store.job_in_flight("default")] == [job.id]
    await settle_jobs(store, [(claimed, Failed(AttemptError("boom")))], at(4))
    retried = await store.job_get(job.id)
    assert (retried.state, retried.run_at, retried.last_error, retried.deadline) == (
        State.SCHEDULED,
        at(14),
        "boom",
        None,
    )
    assert await store.job_next_run_at("default", at(4)) == at(14)
    [again] = await claim_due(store, now=at(14))
    assert again.attempt == 2
    await settle_jobs(store, [(again, Succeeded({"done": 1}))], at(15))
    done = await store.job_get(job.id)
    assert (done.state, done.result, done.finished_at, done.attempt) == (
        State.COMPLETED,
        {"done": 1},
        at(15),
        2,
    )
    history = await store.job_attempts(job.id)
    assert [(a.attempt, a.outcome, a.error, a.started_at) for a in history] == [
        (1, "retried", "boom", T0),
        (2, "completed", None, at(14)),
    ]
    assert history[1].response == {"done": 1}
    assert await store.job_in_flight("default") == []


async def test_settling_an_older_attempt_changes_nothing(store: Store) -> None:
    [job] = await insert(store, new())
    [first] = await claim_due(store)
    await settle_jobs(store, [(first, Failed(AttemptError("boom")))], T0)
    [second] = await claim_due(store, now=at(10))
    # A late report about attempt 1 must not settle attempt 2.
    await settle_jobs(store, [(first, Succeeded())], at(11))
    current = await store.job_get(job.id)
    assert (current.state, current.attempt) == (State.RUNNING, 2)
    assert second.attempt == 2


async def test_batch_defer_note_deadline_payload_and_awaiting(store: Store) -> None:
    [a, b, c] = await insert(store, new(), new(), new(payload={"step": 0}))
    token = await store.lease_acquire("default", "a", T0, TTL)
    assert token is not None
    async with store.queue_batch("default", "a", token, T0, TTL) as batch:
        [claimed] = await batch.job_claim([c], T0)
        await batch.job_defer({a.id: at(100)}, "outside its time windows", T0)
        await batch.job_note_waiting({b.id: "concurrency 1/1 in use"})
        await batch.job_extend_deadlines({c.id: at(500)})
        await batch.job_set_payloads({c.id: {"step": 2}})
        await batch.job_mark_awaiting([(c.id, claimed.attempt)], T0)
    deferred, noted, running = [await store.job_get(j.id) for j in (a, b, c)]
    assert (deferred.run_at, deferred.waiting_reason, deferred.attempt) == (
        at(100),
        "outside its time windows",
        0,
    )
    assert (noted.waiting_reason, noted.state) == ("concurrency 1/1 in use", State.SCHEDULED)
    assert (running.state, running.deadline, running.payload) == (
        State.AWAITING,
        at(500),
        {"step": 2},
    )


async def test_batch_rolls_back_as_a_whole(store: Store) -> None:
    [job] = await insert(store, new())
    token = await store.lease_acquire("default", "a", T0, TTL)
    assert token is not None
    with pytest.raises(RuntimeError):
        async with store.queue_batch("default", "a", token, T0, TTL) as batch:
            await batch.job_claim(await batch.job_due(T0, 10, "time_priority"), T0)
            raise RuntimeError("dispatch bookkeeping failed")
    assert (await store.job_get(job.id)).state == State.SCHEDULED


async def test_cancelled_settlement_and_cancel_flag_reset(store: Store) -> None:
    [job] = await insert(store, new())
    [running] = await claim_due(store)
    await store.job_cancel(job.id, T0)
    await settle_jobs(store, [(running, Cancelled())], at(1))
    done = await store.job_get(job.id)
    assert (done.state, done.cancel_requested, done.finished_at) == (State.CANCELLED, False, at(1))
    assert [a.outcome for a in await store.job_attempts(job.id)] == ["cancelled"]


# -- retention ------------------------------------------------------------------------


async def test_job_prune_deletes_old_finished_jobs_of_one_state_with_their_attempts(
    store: Store,
) -> None:
    old_done, old_failed, running = await insert(store, new(), new(), new())
    claimed = {j.id: j for j in await claim_due(store)}
    await settle_jobs(
        store,
        [
            (claimed[old_done.id], Succeeded({"n": 1})),
            (claimed[old_failed.id], Failed(AttemptError("boom", retryable=False))),
        ],
        T0,
    )
    [recent_done] = await insert(store, new(run_at=at(100)), now=at(100))
    [claimed_recent] = await claim_due(store, now=at(100))
    await settle_jobs(store, [(claimed_recent, Succeeded())], at(100))
    [cancelled] = await insert(store, new(run_at=at(500)))
    await store.job_cancel(cancelled.id, T0)

    assert await store.job_prune(State.COMPLETED, at(50)) == 1
    with pytest.raises(NotFound):
        await store.job_get(old_done.id)
    assert await store.job_attempts(old_done.id) == []
    # Other states, newer jobs and open jobs stay, attempts included.
    left = {j.id: j.state for j in await all_jobs(store)}
    assert left == {
        old_failed.id: State.FAILED,
        running.id: State.RUNNING,
        recent_done.id: State.COMPLETED,
        cancelled.id: State.CANCELLED,
    }
    assert [a.outcome for a in await store.job_attempts(old_failed.id)] == ["failed"]
    assert await store.job_prune(State.COMPLETED, at(50)) == 0
    assert await store.job_prune(State.CANCELLED, at(1)) == 1
    with pytest.raises(ValueError, match="only finished jobs"):
        await store.job_prune(State.SCHEDULED, at(1000))


async def test_job_prune_takes_at_most_its_limit_oldest_first(store: Store) -> None:
    jobs = await insert(store, *[new(run_at=at(500)) for _ in range(5)])
    for job in jobs:
        await store.job_cancel(job.id, T0)
    assert await store.job_prune(State.CANCELLED, at(1), limit=2) == 2
    assert [j.id for j in await all_jobs(store)] == sorted((j.id for j in jobs[2:]), reverse=True)


@pytest.mark.parametrize("value", [1, -7, 2.5, 0, "1", "text", True, False, [1, 2], {"a": 1}])
async def test_json_scalars_read_back_as_they_were_written(store: Store, value: Any) -> None:
    # SQLite gives a JSON column numeric affinity: the text '1' comes back as the
    # integer 1, which is not a JSON document any more.
    (job,) = await insert(store, new(payload=value))
    assert (await store.job_get(job.id)).payload == value


async def test_job_view_reads_the_job_its_attempts_and_its_heartbeat(store: Store) -> None:
    (job,) = await insert(store, new(type="charge", correlation_key="order-1"))
    (running,) = await claim_due(store)
    await settle_jobs(store, [(running, Failed(AttemptError("busy")))], at(1))
    (again,) = await claim_due(store, now=at(60))
    beat, _ = await store.heartbeat_record("order-1", "charge", {"done": 3}, at(61), 30.0)
    view = await store.job_view(job.id)
    assert view.job == await store.job_get(job.id) and view.job.attempt == again.attempt == 2
    assert view.attempts == await store.job_attempts(job.id)
    assert [a.attempt for a in view.attempts] == [1]
    assert view.heartbeat == beat and view.heartbeat.progress == {"done": 3}
    with pytest.raises(NotFound):
        await store.job_view(job.id + 1000)


async def test_job_views_read_each_job_as_job_view_does(store: Store) -> None:
    # Many jobs in one read (on PostgreSQL, on the driver): each as its own view reads it.
    first, second, _ = await insert(
        store,
        new(type="charge", correlation_key="order-1", payload={"n": [1, 2]}, labels={"a": "b"}),
        new(type="charge", correlation_key="order-2"),
        new(run_at=at(500)),
    )
    running = await claim_due(store)
    failed = next(j for j in running if j.id == first.id)
    await settle_jobs(store, [(failed, Failed(AttemptError("busy")))], at(1))
    await claim_due(store, now=at(60))
    await store.heartbeat_record(
        "order-1", "charge", {"done": 3}, at(61), 30.0, checkpoint={"k": 1}
    )
    ids = [first.id, second.id, first.id + 1000]
    views, open_queues = await store.job_views(ids)
    assert open_queues == {}
    views.sort(key=lambda v: v.job.id)  # in no particular order
    assert views == [await store.job_view(first.id), await store.job_view(second.id)]
    assert views[0].attempts[0].error == "busy" and views[0].heartbeat is not None
    assert views[0].heartbeat.checkpoint == {"k": 1} and views[1].heartbeat is None


async def test_a_checkpoint_waits_for_its_tick_and_only_for_its_attempt(store: Store) -> None:
    (job,) = await insert(store, new(type="charge", correlation_key="order-1"))
    await claim_due(store)
    point = {"from": 40}
    beat, _ = await store.heartbeat_record("order-1", "charge", 1, at(1), 30.0, checkpoint=point)
    assert beat.checkpoint == point
    # A later heartbeat without one keeps the checkpoint its loop has not taken yet.
    beat, _ = await store.heartbeat_record("order-1", "charge", 2, at(2), 30.0)
    assert beat.checkpoint == point
    token = await store.lease_acquire("default", "owner-a", at(3), TTL)
    assert token is not None
    async with store.queue_batch("default", "owner-a", token, at(3), TTL) as batch:
        (taken,) = await heartbeat_take(batch)
    assert (taken.attempt, taken.checkpoint) == (1, point)
    # Taken once: the next heartbeat carries none of it.
    beat, _ = await store.heartbeat_record("order-1", "charge", 3, at(4), 30.0)
    assert beat.checkpoint is None
    # A checkpoint not taken before its attempt ended is not the next attempt's.
    await store.heartbeat_record("order-1", "charge", 4, at(5), 30.0, checkpoint=point)
    (running,) = [j for j in await all_jobs(store) if j.id == job.id]
    await settle_jobs(store, [(running, Failed(AttemptError("busy")))], at(6))
    await claim_due(store, now=at(60))
    beat, _ = await store.heartbeat_record("order-1", "charge", 5, at(61), 30.0)
    assert (beat.attempt, beat.checkpoint) == (2, None)


async def test_a_signed_heartbeat_is_taken_once_per_type_until_pruned(store: Store) -> None:
    await insert(store, new(type="charge", correlation_key="order-1"))
    await claim_due(store)
    first, taken = await store.heartbeat_record("order-1", "charge", 1, at(1), 30.0, message="m")
    assert taken
    again, taken = await store.heartbeat_record("order-1", "charge", 2, at(2), 30.0, message="m")
    assert not taken and again == first  # a replay changes nothing
    assert await store.heartbeat_messages_prune(at(1)) == 0
    assert await store.heartbeat_messages_prune(at(5)) == 1
    later, taken = await store.heartbeat_record("order-1", "charge", 3, at(6), 30.0, message="m")
    assert taken and later.progress == 3


async def test_a_group_read_by_a_label_name_holding_a_quote(store: Store) -> None:
    # A share's group read by a config's label name: SQLite's JSON path has no escape
    # for a quote inside a key, so such a name must still find its jobs there.
    name = 'team "a"'
    east, west, bare = await insert(
        store,
        new(labels={name: "east"}),
        new(labels={name: "west"}),
        new(labels={}),
    )
    token = await store.lease_acquire("default", "owner-a", T0, TTL)
    assert token is not None
    async with store.queue_batch("default", "owner-a", token, T0, TTL) as batch:
        only_east = await batch.job_due(T0, 10, "time_priority", label=name, value="east")
        others = await batch.job_due(T0, 10, "time_priority", label=name, other_than=["east"])
    assert [j.id for j in only_east] == [east.id]
    assert sorted(j.id for j in others) == sorted([west.id, bare.id])
