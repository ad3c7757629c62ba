"""The test services themselves: PostgreSQL (incl. the pgserver fallback) and Tansu."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from tests.services import (
    FAST_CONSUMER_GROUP_KWARGS,
    POSTGRES_URL_ENV,
    SUITE_MAX_CONNECTIONS,
    _can_connect,
    _connect_kwargs,
    create_database,
    drop_database,
    start_pgserver,
    unique_database_name,
)


async def _database_exists(admin_url: str, name: str) -> bool:
    conn = await asyncpg.connect(**_connect_kwargs(admin_url))
    try:
        return bool(await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name))
    finally:
        await conn.close()


async def _create_use_drop(admin_url: str) -> None:
    name = unique_database_name()
    url = await create_database(admin_url, name)
    try:
        # The returned URL must work with SQLAlchemy, which is how hipq connects.
        engine = create_async_engine(url)
        try:
            async with engine.connect() as conn:
                assert await conn.scalar(text("SELECT current_database()")) == name
        finally:
            await engine.dispose()
        # A session left open (e.g. by a failed test) must not block the drop.
        leftover = await asyncpg.connect(**_connect_kwargs(url))
        await drop_database(admin_url, name)
        await leftover.close()
    finally:
        await drop_database(admin_url, name)
    assert not await _database_exists(admin_url, name)


@pytest.mark.postgres
async def test_postgres_admin_url_creates_and_drops_databases(postgres_admin_url: str) -> None:
    assert postgres_admin_url.startswith("postgresql+asyncpg://")
    await _create_use_drop(postgres_admin_url)


@pytest.mark.postgres
async def test_the_suite_uses_its_own_server_with_room_for_its_connections(
    postgres_admin_url: str,
) -> None:
    if os.environ.get(POSTGRES_URL_ENV):
        pytest.skip(f"${POSTGRES_URL_ENV} names the server")
    # Not the machine's shared server, whose connections other programs may hold.
    assert make_url(postgres_admin_url).port != 5432
    conn = await asyncpg.connect(**_connect_kwargs(postgres_admin_url))
    try:
        assert int(await conn.fetchval("SHOW max_connections")) >= SUITE_MAX_CONNECTIONS
    finally:
        await conn.close()


@pytest.mark.postgres
async def test_pgserver_starts_a_private_server_on_tcp() -> None:
    server = await asyncio.to_thread(start_pgserver, 50)
    try:
        url = make_url(server.url)
        # TCP on 127.0.0.1: the fault tests' proxy stands in front of it.
        assert url.host == "127.0.0.1"
        await _create_use_drop(server.url)
    finally:
        await asyncio.to_thread(server.stop)
    assert not await _can_connect(server.url, wait_s=5.0)


async def _consume(bootstrap: str, topic: str, group: str, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **FAST_CONSUMER_GROUP_KWARGS,
    )
    await consumer.start()
    try:
        values = []
        async with asyncio.timeout(20):
            while len(values) < count:
                msg = await consumer.getone()
                assert msg.value is not None
                values.append(msg.value)
        await consumer.commit()
        return values
    finally:
        await consumer.stop()


async def _nothing_delivered(bootstrap: str, topic: str, group: str) -> bool:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **FAST_CONSUMER_GROUP_KWARGS,
    )
    await consumer.start()
    try:
        # Poll for a while after the group has assigned partitions: before the
        # assignment an empty poll proves nothing.
        assigned_at: float | None = None
        async with asyncio.timeout(20):
            while assigned_at is None or time.monotonic() - assigned_at < 1.5:
                batches = await consumer.getmany(timeout_ms=200)
                if any(batches.values()):
                    return False
                if assigned_at is None and consumer.assignment():
                    assigned_at = time.monotonic()
        return True
    finally:
        await consumer.stop()


@pytest.mark.kafka
async def test_kafka_produce_consume_commit_without_redelivery(kafka_bootstrap: str) -> None:
    topic = f"services-{uuid.uuid4().hex[:8]}"
    group = f"group-{uuid.uuid4().hex[:8]}"
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"first", key=b"k")
        assert await _consume(kafka_bootstrap, topic, group, 1) == [b"first"]

        # A reopened group resumes after its committed offset.
        await producer.send_and_wait(topic, b"second", key=b"k")
        assert await _consume(kafka_bootstrap, topic, group, 1) == [b"second"]
        assert await _nothing_delivered(kafka_bootstrap, topic, group)
    finally:
        await producer.stop()
