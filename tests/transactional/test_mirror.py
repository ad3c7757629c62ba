"""The job types and queues each starting process mirrors into the database: what jobs
added in SQL are checked against. The same config written twice changes nothing; a
different config replaces it (last start wins) and says what it replaced."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from hipq.process.job_types_publisher import key_parts
from hipq.service import Service
from hipq.store import Store
from hipq.store.job_types_mirror import MirroredJobType, MirroredQueue
from hipq.templates import JOB_ROOTS, compile_template
from hipq.transactional import EnqueueError, add_job_async
from tests.transactional.conftest import JOB_TYPES, started

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


async def test_the_store_reads_back_what_it_wrote(store: Store) -> None:
    parts = key_parts(compile_template("m-{payload.to}", JOB_ROOTS))
    mail = MirroredJobType(
        "mail", "default", 5, 2, 60.0, {"strategy": "none"}, "m-{payload.to}", parts
    )
    plain = MirroredJobType("plain", "default", 100, 1, 86400.0, {"strategy": "exponential"})
    queues = [MirroredQueue("default", None), MirroredQueue("slow", 4)]
    first = await store.job_types_mirror_write([mail, plain], queues, "a", NOW)
    assert first.job_types.added == ["mail", "plain"] and not first.job_types.changed
    types, read_queues = await store.job_types_mirror_read()
    assert types == {"mail": mail, "plain": plain}
    assert list(read_queues.values()) == queues
    again = await store.job_types_mirror_write([mail, plain], queues, "b", NOW)
    assert not again.job_types and not again.queues  # the same config: nothing to change


async def test_a_different_config_replaces_the_mirror_and_says_what(store: Store) -> None:
    plain = MirroredJobType("plain", "default", 100, 1, 86400.0, {"strategy": "exponential"})
    await store.job_types_mirror_write([plain], [MirroredQueue("default", None)], "a", NOW)
    changed = plain.__class__(**{**_fields(plain), "priority": 1})
    other = MirroredJobType("other", "default", 100, 1, 10.0, {"strategy": "none"})
    change = await store.job_types_mirror_write(
        [changed, other], [MirroredQueue("fast", 2)], "b", NOW
    )
    assert (change.job_types.added, change.job_types.changed) == (["other"], ["plain"])
    assert (change.queues.added, change.queues.removed) == (["fast"], ["default"])
    types, queues = await store.job_types_mirror_read()
    assert types == {"other": other, "plain": changed}
    assert list(queues) == ["fast"]


def _fields(t: MirroredJobType) -> dict[str, object]:
    return {name: getattr(t, name) for name in t.__slots__}


async def test_the_last_process_to_start_defines_what_sql_accepts(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    first: Service = await started(database_url)
    await first.stop()
    # A process with another config: "receipt" is gone, "invoice" is new.
    types = {"invoice": {**JOB_TYPES["receipt"], "correlation_key": None}}
    with caplog.at_level(logging.WARNING, logger="hipq.job_types"):
        second = await started(database_url, job_types=types)
    await second.stop()
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "removed: per_attempt, receipt" in warning
    engine = create_async_engine(database_url)
    try:
        with pytest.raises(EnqueueError, match="unknown job type 'receipt'"):
            async with engine.begin() as conn:
                await add_job_async(conn, "receipt", {"order": 1}, labels={"region": "e"})
        async with engine.begin() as conn:
            job_id = await add_job_async(conn, "invoice", {"order": 1})
    finally:
        await engine.dispose()
    assert job_id > 0


async def test_processes_starting_together_with_one_config_agree(database_url: str) -> None:
    plain = MirroredJobType("plain", "default", 100, 1, 86400.0, {"strategy": "exponential"})
    queues = [MirroredQueue("default", None)]
    stores = [Store.from_url(database_url) for _ in range(4)]
    try:
        changes = await asyncio.gather(
            *(s.job_types_mirror_write([plain], queues, f"p{i}", NOW) for i, s in enumerate(stores))
        )
        # One of them wrote the rows; the others found them as they would have written them.
        assert sorted(bool(c.job_types) for c in changes) == [False, False, False, True]
        assert await stores[0].job_types_mirror_read() == ({"plain": plain}, {"default": queues[0]})
    finally:
        for s in stores:
            await s.close()
