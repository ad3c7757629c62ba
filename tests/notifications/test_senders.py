"""The notifier against the real broker, and several processes sharing one outbox on
PostgreSQL (each notification taken by one of them at a time)."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest

from tests.api.conftest import open_api
from tests.notifications.conftest import Receiver, notify_settings
from tests.support import FakeClock
from tests.transports.test_kafka import read_all


@pytest.mark.kafka
async def test_outcomes_go_to_a_kafka_topic(sqlite_url: str, kafka_bootstrap: str) -> None:
    topic = f"outcomes-{uuid.uuid4().hex[:10]}"
    receiver = Receiver()
    settings = notify_settings(
        receiver, targets={"bus": {"kafka": {"topic": topic}}}, kafka={"enabled": True}
    )
    settings["kafka"]["bootstrap_servers"] = kafka_bootstrap
    async with open_api(sqlite_url, **settings) as api:
        done = await api.post_job(type="ok", notify=["bus"])
        failed = await api.post_job(type="permanent", notify=["bus", "hook"])
        await api.tick()
        deliveries = await api.service.notifier.run_once()
        # The webhook receiver is down; the broker is up.
        assert sorted(d.error is None for d in deliveries) == [False, True, True]
        messages = await read_all(kafka_bootstrap, topic, 2)
        by_key = {m.key.decode(): m for m in messages}
        assert set(by_key) == {str(done["id"]), str(failed["id"])}
        body = orjson.loads(by_key[str(done["id"])].value)
        assert body["type"] == "job.completed" and body["data"]["result"] == {"echo": {}}
        headers = dict(by_key[str(failed["id"])].headers)
        shown = (await api.client.get(f"/v1/jobs/{failed['id']}/notifications")).json()
        bus = next(n for n in shown if n["target"] == "bus")
        hook = next(n for n in shown if n["target"] == "hook")
        assert headers["webhook-id"].decode() == f"hipq-notification-{bus['id']}"
        assert bus["status"] == "sent" and hook["status"] == "failing"


@pytest.mark.postgres
async def test_processes_sharing_the_outbox_send_each_notification_once(
    postgres_url: str,
) -> None:
    from tests.conftest import _truncate

    await _truncate(postgres_url)
    receiver = Receiver()
    clock = FakeClock()
    settings = notify_settings(receiver)
    settings["notifications"]["batch_size"] = 7
    async with (
        receiver.up(),
        open_api(postgres_url, clock=clock, **settings) as one,
        open_api(postgres_url, clock=clock, **settings) as two,
        open_api(postgres_url, clock=clock, **settings) as three,
    ):
        ids = [(await one.post_job(type="ok", payload={"i": i}))["id"] for i in range(60)]
        await one.tick(ticks=10)
        notifiers = [p.service.notifier for p in (one, two, three)]
        for _ in range(20):
            rounds = await asyncio.gather(*(n.run_once() for n in notifiers))
            if not any(rounds):
                break
        got = [g["body"]["data"]["job_id"] for g in receiver.accepted()]
        assert sorted(got) == ids  # each once: none twice, none lost
