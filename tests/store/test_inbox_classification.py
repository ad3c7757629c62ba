"""The store conformance suite, the inbox's classification: which responses are
duplicates, late or expired, decided once and never against a match the loop made,
on SQLite and PostgreSQL. Time is pinned by each test (see test_conformance)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.ingest.response_intake import new_response
from hipq.lifecycle import State
from hipq.outcome_rules import OutcomeRule
from hipq.outcomes import Failed, Succeeded
from hipq.retry import AttemptError
from hipq.store import NewResponse, Store
from tests.store.test_conformance import at, claim_due, settle_jobs
from tests.store.test_inbox import accept_late, in_flight, mark, match, receive, response
from tests.support import eventually

NOTHING = {"duplicate": 0, "late": 0, "expired": 0}
STATUS_OK = OutcomeRule(field="status", success=("ok",))


def callback(key: str, body: Any, **headers: str) -> NewResponse:
    """A webhook call as the callback route stores it."""
    return new_response(key, body, source="webhook", rule=STATUS_OK, headers=headers)


class _TickAfterFirstStatement:
    """A connection that runs ``tick`` once, after its first statement: another
    transaction commits between the classifier's statements."""

    def __init__(self, conn: AsyncConnection, tick: Callable[[], Awaitable[None]]) -> None:
        self._conn, self._tick, self._ran = conn, tick, False

    async def execute(self, *args: Any, **kwargs: Any) -> Any:
        result = await self._conn.execute(*args, **kwargs)
        if not self._ran:
            self._ran = True
            await self._tick()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def test_a_match_committed_while_classifying_stays_matched(postgres_url_fresh: str) -> None:
    # PostgreSQL only: SQLite's writers take turns, so nothing commits in between.
    store = Store.from_url(postgres_url_fresh)
    try:
        job = await in_flight(store, "k")
        [rid] = await receive(store, response("k"))

        async def loop_tick() -> None:
            [found], _ = await match(store, now=at(1))
            await mark(store, [(found.response.id, found.job_id)], [], now=at(1))
            await settle_jobs(store, [(job, Succeeded({"ok": True}))], at(1))

        write = store._write

        @asynccontextmanager
        async def interleaved() -> AsyncIterator[Any]:
            del store._write  # only the classifier's transaction: the tick's are plain
            async with write() as conn:
                yield _TickAfterFirstStatement(conn, loop_tick)

        store._write = interleaved  # type: ignore[method-assign]
        counts = await store.response_classify(at(2))
        got = await store.response_get(rid)
        assert (got.status, got.job_id, got.settled_at) == ("matched", job.id, at(1))
        assert counts == NOTHING  # nothing was written, nothing is counted
        assert (await store.job_get(job.id)).state == State.COMPLETED
    finally:
        await store.close()


async def test_a_late_success_after_an_earlier_attempt_matched_is_late(store: Store) -> None:
    job = await in_flight(store, "k", type="lenient")
    [declined] = await receive(store, response("k", False, body={"status": "declined"}))
    await mark(store, [(declined, job.id)], [])
    await settle_jobs(store, [(job, Failed(AttemptError("declined")))], at(1))
    [second] = await claim_due(store, now=at(11))  # the retry, 10 s later
    assert second.attempt == 2
    await settle_jobs(store, [(second, Failed(AttemptError("timeout", retryable=False)))], at(12))
    [late] = await receive(store, response("k", body={"status": "ok"}), now=at(13))
    assert await store.response_classify(at(14)) == {**NOTHING, "late": 1}
    assert (await store.response_get(late)).status == "late"
    assert await accept_late(store, ["lenient"], at(15)) == [job.id]
    done = await store.job_get(job.id)
    assert (done.state, done.result) == (State.COMPLETED, {"status": "ok"})
    assert (await store.response_get(late)).status == "matched"
    assert (await store.response_get(declined)).status == "matched"


async def test_a_second_copy_of_the_last_attempts_response_is_a_duplicate(store: Store) -> None:
    job = await in_flight(store, "k")
    [declined] = await receive(store, response("k", False, body={"status": "declined"}))
    await mark(store, [(declined, job.id)], [])
    await settle_jobs(store, [(job, Failed(AttemptError("declined")))], at(1))
    [second] = await claim_due(store, now=at(11))
    [ok] = await receive(store, response("k", body={"status": "ok"}), now=at(12))
    await mark(store, [(ok, job.id)], [], now=at(12))
    await settle_jobs(store, [(second, Succeeded({"status": "ok"}))], at(12))
    [again] = await receive(store, response("k", body={"status": "ok", "n": 2}), now=at(13))
    assert await store.response_classify(at(14)) == {**NOTHING, "duplicate": 1}
    got = await store.response_get(again)
    assert (got.status, got.job_id) == ("duplicate", job.id)


async def test_classify_reaches_responses_behind_a_page_of_unknown_keys(store: Store) -> None:
    job = await in_flight(store, "k")
    [first] = await receive(store, response("k"))
    await mark(store, [(first, job.id)], [])
    await settle_jobs(store, [(job, Succeeded({"ok": 1}))], at(1))
    failed = await in_flight(store, "f")
    await settle_jobs(store, [(failed, Failed(AttemptError("no", retryable=False)))], at(1))
    unknown = await receive(store, *(response(f"nobody-{i}") for i in range(15)), now=at(2))
    again, late = await receive(store, response("k"), response("f"), now=at(2))
    for _ in range(3):  # a few passes, as upkeep makes them
        await store.response_classify(at(3), limit=10)
    assert (await store.response_get(again)).status == "duplicate"
    assert (await store.response_get(late)).status == "late"
    assert {(await store.response_get(i)).status for i in unknown} == {"pending"}


async def test_a_copy_of_a_matched_response_never_settles_the_next_attempt(store: Store) -> None:
    job = await in_flight(store, "k")
    [failure] = await receive(store, callback("k", {"status": "declined"}))
    await mark(store, [(failure, job.id)], [])
    await settle_jobs(store, [(job, Failed(AttemptError("declined")))], at(1))
    [copy] = await receive(store, callback("k", {"status": "declined"}), now=at(2))
    await claim_due(store, now=at(11))  # attempt 2 goes out; the copy waits ahead of it
    [success] = await receive(store, callback("k", {"status": "ok"}), now=at(12))
    matches, duplicates = await match(store, now=at(12))
    assert [(m.response.id, m.job_id) for m in matches] == [(success, job.id)]
    assert duplicates == [copy]


async def test_a_copy_is_a_duplicate_while_the_job_waits_for_its_retry(store: Store) -> None:
    job = await in_flight(store, "k")
    [failure] = await receive(store, callback("k", {"status": "declined"}))
    await mark(store, [(failure, job.id)], [])
    await settle_jobs(store, [(job, Failed(AttemptError("declined")))], at(1))
    [copy] = await receive(store, callback("k", {"status": "declined"}), now=at(2))
    assert await store.response_classify(at(3)) == {**NOTHING, "duplicate": 1}
    got = await store.response_get(copy)
    assert (got.status, got.job_id) == ("duplicate", job.id)
    await claim_due(store, now=at(11))
    assert await match(store, now=at(11)) == ([], [])


async def test_the_webhook_id_tells_copies_from_new_deliveries(store: Store) -> None:
    job = await in_flight(store, "k")
    [first] = await receive(store, callback("k", {"status": "declined"}, **{"webhook-id": "m1"}))
    await mark(store, [(first, job.id)], [])
    await settle_jobs(store, [(job, Failed(AttemptError("declined")))], at(1))
    # The same message redelivered (its body re-rendered), then a new message with
    # the same body: only the first is a copy.
    copy, fresh = await receive(
        store,
        callback("k", {"status": "declined", "at": 2}, **{"webhook-id": "m1"}),
        callback("k", {"status": "declined"}, **{"webhook-id": "m2"}),
        now=at(2),
    )
    await claim_due(store, now=at(11))
    matches, duplicates = await match(store, now=at(11))
    assert [(m.response.id, m.job_id) for m in matches] == [(fresh, job.id)]
    assert duplicates == [copy]


async def test_the_same_body_under_another_key_is_no_copy(store: Store) -> None:
    first_job = await in_flight(store, "a")
    [first] = await receive(store, callback("a", {"status": "ok"}))
    await mark(store, [(first, first_job.id)], [])
    other = await in_flight(store, "b")
    [same_body] = await receive(store, callback("b", {"status": "ok"}))
    matches, duplicates = await match(store)
    assert [(m.response.id, m.job_id) for m in matches] == [(same_body, other.id)]
    assert duplicates == []


class _PauseAfterResponseUpdate:
    """A connection that, right after its UPDATE of the inbox (still uncommitted, the
    row locked), runs ``pause`` once: upkeep starts and waits for that row's lock."""

    def __init__(self, conn: AsyncConnection, pause: Callable[[], Awaitable[None]]) -> None:
        self._conn, self._pause, self._ran = conn, pause, False

    async def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        result = await self._conn.execute(statement, *args, **kwargs)
        text = str(statement)
        if not self._ran and text.startswith("UPDATE hipq_responses"):
            self._ran = True
            await self._pause()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


async def test_a_match_by_hand_committed_while_upkeep_waits_for_the_row_is_kept(
    postgres_url_fresh: str,
) -> None:
    # PostgreSQL only: upkeep's UPDATE chose the row from its snapshot and waits for the
    # lock of the operator's uncommitted match; once that commits, the row is checked
    # again, and it is no longer upkeep's to settle. (SQLite's writers take turns.)
    operator, upkeep = Store.from_url(postgres_url_fresh), Store.from_url(postgres_url_fresh)
    try:
        finished = await in_flight(operator, "k")
        await settle_jobs(
            operator, [(finished, Failed(AttemptError("timeout", retryable=False)))], at(1)
        )
        chosen = await in_flight(operator, "other")
        [rid] = await receive(operator, response("k"))
        classifying: list[asyncio.Task[dict[str, int]]] = []

        async def upkeep_waits() -> None:
            classifying.append(asyncio.create_task(upkeep.response_classify(at(2))))

            async def waiting() -> bool:
                async with operator._read() as conn:
                    blocked = await conn.execute(
                        text("SELECT count(*) FROM pg_locks WHERE NOT granted")
                    )
                    return bool(blocked.scalar())

            await eventually(waiting, timeout=60)

        write = operator._write

        @asynccontextmanager
        async def paused() -> AsyncIterator[Any]:
            async with write() as conn:
                yield _PauseAfterResponseUpdate(conn, upkeep_waits)

        operator._write = paused  # type: ignore[method-assign]
        await operator.response_force_match(rid, chosen.id, at(2))
        del operator._write
        counts = await classifying[0]
        got = await operator.response_get(rid)
        assert (got.status, got.forced_job_id) == ("pending", chosen.id)
        assert counts == NOTHING
    finally:
        await operator.close()
        await upkeep.close()
