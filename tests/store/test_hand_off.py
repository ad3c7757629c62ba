"""The hand-off's statements on both engines: a claim leaves a job the owner's to send,
a hand-over names its executor, the executor reads what it was handed, and the
owner takes the reports once, in its tick's transaction."""

from __future__ import annotations

from hipq.lifecycle import State
from hipq.outcomes import Failed
from hipq.retry import AttemptError
from hipq.store import Store
from hipq.store.hand_off import Report
from tests.store.test_conformance import T0, TTL, at, claim_due, insert, new, settle_jobs


async def test_a_handed_job_is_read_by_its_executor_until_it_leaves_running(store: Store) -> None:
    jobs = await insert(store, new(), new(), new())
    claimed = await claim_due(store)
    assert await store.job_handed("exec-b") == []  # a claim hands nothing over
    token = await store.lease_acquire("default", "owner-a", T0, TTL)
    assert token is not None
    async with store.queue_batch("default", "owner-a", token, T0, TTL) as batch:
        await batch.job_hand_off({claimed[0].id: "exec-b", claimed[1].id: "exec-c"})
    handed = await store.job_handed("exec-b")
    assert [(j.id, j.attempt, j.state) for j in handed] == [(jobs[0].id, 1, State.RUNNING)]
    assert await store.job_executors("default") == {jobs[0].id: "exec-b", jobs[1].id: "exec-c"}

    async with store.queue_batch("default", "owner-a", token, at(1), TTL) as batch:
        await batch.job_mark_awaiting([(jobs[0].id, 1)], at(1))
    assert await store.job_handed("exec-b") == []  # sent: nothing left to send


async def test_a_new_claim_takes_the_job_back_from_its_last_executor(store: Store) -> None:
    await insert(store, new(retry={"strategy": "fixed", "delay": 10}))
    (job,) = await claim_due(store)
    token = await store.lease_acquire("default", "owner-a", T0, TTL)
    assert token is not None
    async with store.queue_batch("default", "owner-a", token, T0, TTL) as batch:
        await batch.job_hand_off({job.id: "exec-b"})
    await settle_jobs(store, [(job, Failed(AttemptError("down")))], at(1))  # retried
    (again,) = await claim_due(store, at(20))  # the owner's to send again
    assert again.attempt == 2
    assert await store.job_executors("default") == {}
    assert await store.job_handed("exec-b") == []


async def test_reports_are_taken_once_by_their_queue_s_owner(store: Store) -> None:
    await store.report_add(
        [
            Report("default", 1, 1, "sent"),
            Report("default", 2, 1, "outcome", body={"$type": "Succeeded", "result": None}),
            Report("default", 3, 1, "heartbeat", deadline=at(60)),
            Report("other", 4, 1, "checkpoint", body={"step": 2}),
        ]
    )
    token = await store.lease_acquire("default", "owner-a", T0, TTL)
    assert token is not None
    async with store.queue_batch("default", "owner-a", token, T0, TTL) as batch:
        taken = await batch.report_take()
    assert [(r.job_id, r.kind) for r in taken] == [(1, "sent"), (2, "outcome"), (3, "heartbeat")]
    assert taken[1].body == {"$type": "Succeeded", "result": None}
    assert taken[2].deadline == at(60)
    async with store.queue_batch("default", "owner-a", token, T0, TTL) as batch:
        assert await batch.report_take() == []


async def test_reports_taken_by_a_tick_that_fails_stay_for_the_next(store: Store) -> None:
    await store.report_add([Report("default", 1, 1, "sent")])
    token = await store.lease_acquire("default", "owner-a", T0, TTL)
    assert token is not None
    try:
        async with store.queue_batch("default", "owner-a", token, T0, TTL) as batch:
            assert len(await batch.report_take()) == 1
            raise RuntimeError("the tick fails")
    except RuntimeError:
        pass
    async with store.queue_batch("default", "owner-a", token, T0, TTL) as batch:
        assert [r.job_id for r in await batch.report_take()] == [1]
