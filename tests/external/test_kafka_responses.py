"""Kafka jobs against a real broker and a responder that answers on a response topic."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from hipq.service import Service
from hipq.store import JobFilter, Store
from tests.services import FAST_CONSUMER_GROUP_KWARGS
from tests.support import eventually, make_settings

pytestmark = pytest.mark.kafka


@contextlib.asynccontextmanager
async def responder(
    bootstrap: str, requests: str, responses: str, answered: list[str]
) -> AsyncIterator[AIOKafkaProducer]:
    """Consumes hipq's requests and answers each on ``responses``, keyed by header."""
    consumer = AIOKafkaConsumer(
        requests,
        bootstrap_servers=bootstrap,
        group_id=f"responder-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        **FAST_CONSUMER_GROUP_KWARGS,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await consumer.start()
    await producer.start()

    async def run() -> None:
        async for message in consumer:
            request = orjson.loads(message.value)
            key = dict(message.headers)["correlation_id"]
            status = "ok" if not request.get("decline") else "declined"
            body = {"status": status, "order_id": request["order_id"]}
            await producer.send_and_wait(
                responses, orjson.dumps(body), headers=[("correlation_id", key)]
            )
            answered.append(key.decode())

    task = asyncio.create_task(run())
    try:
        yield producer
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await consumer.stop()
        await producer.stop()


async def test_kafka_jobs_complete_by_correlated_response_messages(
    database_url: str, kafka_bootstrap: str
) -> None:
    suffix = uuid.uuid4().hex[:8]
    requests, responses = f"orders.requests.{suffix}", f"orders.responses.{suffix}"
    settings = make_settings(
        database_url,
        queues={"default": {"batch_interval": "100ms"}},
        job_types={
            "send_order": {
                "correlation_key": "{payload.order_id}",
                "timeout": "30s",
                "retry": {"strategy": "none"},
                "transport": {"kafka": {"topic": requests}},
            }
        },
        kafka={
            "enabled": True,
            "bootstrap_servers": kafka_bootstrap,
            "group_id": f"hipq-{suffix}",
            "session_timeout": "1s",
            "heartbeat_interval": "200ms",
            "responses": [
                {
                    "topic": responses,
                    "key": "{headers.correlation_id}",
                    "outcome": {"field": "status", "success": ["ok"]},
                }
            ],
        },
    )
    answered: list[str] = []
    service = Service(settings)
    await service.start()
    try:
        async with responder(kafka_bootstrap, requests, responses, answered) as producer:
            # A bad message on the response topic is parked; the consumer goes on.
            await producer.send_and_wait(responses, b"\xff not json")
            now = service.clock()
            payloads: list[dict[str, Any]] = [
                {"order_id": f"o-{i}", "decline": i % 10 == 0} for i in range(50)
            ]
            new = [
                service.intake.resolve({"type": "send_order", "payload": p}, now) for p in payloads
            ]
            await service.store.job_insert_many(new, now)
            service.wake_all()

            async def settled() -> bool:
                open_jobs = await service.store.job_list(
                    JobFilter(states=("scheduled", "running", "awaiting"))
                )
                return not open_jobs

            await eventually(settled, timeout=60, interval=0.2)
            assert await eventually(lambda: service.status()["kafka_consumer"], timeout=60)
    finally:
        await service.stop()
    done = await service_jobs(database_url, "completed")
    failed = await service_jobs(database_url, "failed")
    assert sorted(j.payload["order_id"] for j in done) == sorted(
        p["order_id"] for p in payloads if not p["decline"]
    )
    assert {j.last_error for j in failed} == {"no retries: status='declined' is not one of ok"}
    assert all(j.result == {"status": "ok", "order_id": j.payload["order_id"]} for j in done)
    store = Store.from_url(database_url)
    try:
        parked = await store.parked_list()
    finally:
        await store.close()
    assert [p["source"] for p in parked] == [f"kafka:{responses}"]
    assert "UTF-8" in parked[0]["reason"] or "JSON" in parked[0]["reason"]


async def service_jobs(database_url: str, state: str) -> list[Any]:
    store = Store.from_url(database_url)
    try:
        return await store.job_list(JobFilter(states=(state,), limit=1000))
    finally:
        await store.close()
