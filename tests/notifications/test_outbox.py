"""Outcome notifications through the outbox, on both engines, to a real loopback
webhook receiver: one per terminal state, signed, retried while the receiver is down,
kept across a restart, never written for a change that rolled back."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from hipq.lifecycle import State
from hipq.store.schema import jobs
from tests.api.conftest import Api, open_api
from tests.notifications.conftest import Receiver, notify_settings
from tests.support import FakeClock


async def notifications_of(api: Api, job_id: int) -> list[dict[str, Any]]:
    answer = await api.client.get(f"/v1/jobs/{job_id}/notifications")
    assert answer.status_code == 200, answer.text
    return answer.json()


async def test_each_terminal_state_is_notified_once_and_signed(database_url: str) -> None:
    receiver = Receiver()
    async with receiver.up(), open_api(database_url, **notify_settings(receiver)) as api:
        done = await api.post_job(type="ok", payload={"n": 1})
        failed = await api.post_job(type="permanent")
        cancelled = await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        completed_by_hand = await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        silent = await api.post_job(type="ok", notify=[])
        await api.tick()
        assert (await api.client.post(f"/v1/jobs/{cancelled['id']}/cancel")).status_code == 200
        answer = await api.client.post(
            f"/v1/jobs/{completed_by_hand['id']}/complete", json={"result": "by hand"}
        )
        assert answer.status_code == 200
        assert not receiver.got  # nothing is sent before the notifier runs
        await api.service.notifier.run_once()

        assert all(g["status"] == 204 for g in receiver.got)  # each signature verified
        by_job = {g["body"]["data"]["job_id"]: g for g in receiver.got}
        assert len(receiver.got) == 4 and set(by_job) == {
            done["id"],
            failed["id"],
            cancelled["id"],
            completed_by_hand["id"],
        }
        assert by_job[done["id"]]["body"]["type"] == "job.completed"
        assert by_job[done["id"]]["body"]["data"]["result"] == {"echo": {"n": 1}}
        assert by_job[failed["id"]]["body"]["data"]["state"] == "failed"
        assert by_job[failed["id"]]["body"]["data"]["error"]
        assert by_job[cancelled["id"]]["body"]["type"] == "job.cancelled"
        assert by_job[completed_by_hand["id"]]["body"]["data"]["result"] == "by hand"
        assert silent["id"] not in by_job
        shown = await notifications_of(api, done["id"])
        assert [(n["status"], n["attempts"], n["job_state"]) for n in shown] == [
            ("sent", 1, "completed")
        ]
        assert by_job[done["id"]]["id"] == f"hipq-notification-{shown[0]['id']}"
        assert (await api.job(done["id"]))["notify"] == ["hook"]
        assert await notifications_of(api, silent["id"]) == []
        await api.service.notifier.run_once()
        assert len(receiver.got) == 4  # sent ones are not sent again


async def test_a_retried_job_that_fails_later_is_notified_once(database_url: str) -> None:
    receiver = Receiver()
    clock = FakeClock()
    async with (
        receiver.up(),
        open_api(database_url, clock=clock, **notify_settings(receiver)) as api,
    ):
        job = await api.post_job(type="fail")
        await api.tick()  # attempt 1 fails: retried, not terminal
        await api.service.notifier.run_once()
        assert receiver.got == []
        clock.advance(11)
        await api.tick()  # attempt 2 fails: failed for good
        await api.service.notifier.run_once()
        told = [(g["body"]["data"]["state"], g["body"]["data"]["attempt"]) for g in receiver.got]
        assert told == [("failed", 2)]
        # An operator's retry makes it run again: its next terminal state is notified too.
        # (it has spent its attempts: attempt 3 fails for good at once.)
        assert (await api.client.post(f"/v1/jobs/{job['id']}/retry")).status_code == 200
        await api.tick()
        await api.service.notifier.run_once()
        assert [g["body"]["data"]["attempt"] for g in receiver.got] == [2, 3]
        assert len({g["id"] for g in receiver.got}) == 2


async def test_a_receiver_that_is_down_gets_everything_after_a_restart(
    database_url: str,
) -> None:
    receiver = Receiver()
    clock = FakeClock()
    settings = notify_settings(receiver)
    async with open_api(database_url, clock=clock, **settings) as api:
        ids = [(await api.post_job(type="ok", payload={"i": i}))["id"] for i in range(5)]
        await api.tick()
        await api.service.notifier.run_once()  # nothing listens on the port
        shown = await notifications_of(api, ids[0])
        assert shown[0]["status"] == "failing" and shown[0]["attempts"] == 1
        assert "ConnectError" in shown[0]["last_error"]
        failing = (await api.client.get("/v1/notifications?status=failing")).json()
        assert len(failing["notifications"]) == 5
        async with receiver.up():
            receiver.status = 503  # up, but not taking them yet
            clock.advance(1)
            await api.service.notifier.run_once()
            assert len(receiver.got) == 5 and not receiver.accepted()
            shown = await notifications_of(api, ids[0])
            assert shown[0]["attempts"] == 2 and shown[0]["last_error"].startswith("HTTP 503")
            await api.service.notifier.run_once()  # not due yet: backoff
            assert len(receiver.got) == 5
    # A new process on the same database sends what is left, with the same message ids.
    async with receiver.up(), open_api(database_url, clock=clock, **settings) as api:
        receiver.status = 200
        clock.advance(2)
        await api.service.notifier.run_once()
        accepted = receiver.accepted()
        assert sorted(g["body"]["data"]["job_id"] for g in accepted) == ids
        first_ids = {g["id"] for g in receiver.got[:5]}
        assert {g["id"] for g in accepted} == first_ids  # the same webhook-id every try
        for job_id in ids:
            [shown_one] = await notifications_of(api, job_id)
            assert shown_one["status"] == "sent" and shown_one["attempts"] == 3
        assert (await api.client.get("/v1/notifications?status=failing")).json()[
            "notifications"
        ] == []


async def test_a_state_change_that_rolled_back_sends_nothing(database_url: str) -> None:
    receiver = Receiver()
    async with receiver.up(), open_api(database_url, **notify_settings(receiver)) as api:
        job = await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z")
        store = api.service.store
        with pytest.raises(RuntimeError, match="rolled back"):
            async with store._write() as conn:
                await conn.execute(
                    update(jobs).where(jobs.c.id == job["id"]).values(state=State.COMPLETED.value)
                )
                raise RuntimeError("rolled back")
        assert (await api.job(job["id"]))["state"] == "scheduled"
        assert await notifications_of(api, job["id"]) == []
        await api.service.notifier.run_once()
        assert receiver.got == []


async def test_a_settle_that_lost_its_race_writes_no_notification(database_url: str) -> None:
    receiver = Receiver()
    async with receiver.up(), open_api(database_url, **notify_settings(receiver)) as api:
        job = await api.post_job(type="hang")
        await api.tick()
        # An operator cancels the running job; the loop settles it once.
        assert (await api.client.post(f"/v1/jobs/{job['id']}/cancel")).status_code == 202
        await api.tick()
        await api.tick()
        assert (await api.job(job["id"]))["state"] == "cancelled"
        assert len(await notifications_of(api, job["id"])) == 1


async def test_bulk_verbs_notify_each_job(database_url: str) -> None:
    receiver = Receiver()
    async with receiver.up(), open_api(database_url, **notify_settings(receiver)) as api:
        ids = [
            (await api.post_job(type="ok", run_at="2030-01-01T00:00:00Z"))["id"] for _ in range(3)
        ]
        answer = await api.client.post(
            "/v1/jobs/bulk", json={"action": "cancel", "filter": {"ids": ids}}
        )
        assert answer.status_code in (200, 202), answer.text
        await api.service.bulk.run_once()
        await api.service.notifier.run_once()
        assert sorted(g["body"]["data"]["job_id"] for g in receiver.accepted()) == ids


async def test_a_sent_notification_is_pruned_with_its_job_a_pending_one_keeps_it(
    database_url: str,
) -> None:
    receiver = Receiver()
    clock = FakeClock()
    async with open_api(database_url, clock=clock, **notify_settings(receiver)) as api:
        job = await api.post_job(type="ok")
        await api.tick()
        store = api.service.store
        later = clock.now + timedelta(days=1)
        assert await store.job_prune(State.COMPLETED, later) == 0  # not sent yet: kept
        async with receiver.up():
            await api.service.notifier.run_once()
        assert await store.job_prune(State.COMPLETED, later) == 1
        assert await store.notification_list(job_id=job["id"]) == []


async def test_unknown_targets_are_refused(sqlite_url: str) -> None:
    receiver = Receiver()
    async with open_api(sqlite_url, **notify_settings(receiver)) as api:
        answer = await api.client.post("/v1/jobs", json={"type": "ok", "notify": ["hook", "nope"]})
        assert answer.status_code == 422
        assert answer.json()["field"] == "notify[1]" and "nope" in answer.json()["message"]
        assert await api.count_jobs() == 0
        missing = await api.client.get("/v1/jobs/999/notifications")
        assert missing.status_code == 404 and missing.json()["field"] == "id"
        bad = await api.client.get("/v1/notifications?status=lost")
        assert bad.status_code == 422 and bad.json()["field"] == "status"


def test_a_job_type_naming_an_unknown_target_fails_at_start(sqlite_url: str) -> None:
    from hipq.config import ConfigError
    from tests.support import make_settings

    with pytest.raises(ConfigError, match=r"job_types.x.notify: unknown notification target"):
        make_settings(
            sqlite_url,
            job_types={"x": {"transport": {"python": {"handler": "a:b"}}, "notify": ["gone"]}},
        )


def test_the_lifecycle_log_names_a_failed_notification() -> None:
    from hipq.observability.lifecycle_log import describe

    line = describe(
        "notification_failed",
        {"id": 4, "job_id": 9, "target": "hook", "attempts": 2, "error": "HTTP 503"},
    )
    assert line is not None and line[1] == "notification_failed"
    assert line[2] == {"id": 4, "job_id": 9, "target": "hook", "attempts": 2, "reason": "HTTP 503"}


async def test_a_notification_held_by_a_process_that_died_is_sent_after_its_lease(
    database_url: str,
) -> None:
    receiver = Receiver()
    clock = FakeClock()
    async with open_api(database_url, clock=clock, **notify_settings(receiver)) as api:
        job = await api.post_job(type="ok")
        await api.tick()
        store = api.service.store
        # A process takes it and dies before it records anything.
        [held] = await store.notification_take(clock.now, 10, lease_seconds=60)
        assert held.job_id == job["id"]
        async with receiver.up():
            clock.advance(30)
            assert await api.service.notifier.run_once() == []  # still leased
            clock.advance(31)
            [delivery] = await api.service.notifier.run_once()
        assert delivery.error is None
        assert [g["body"]["data"]["job_id"] for g in receiver.accepted()] == [job["id"]]
