"""The private SQLAlchemy and asyncpg attributes of ``hipq.store.asyncpg_adapter``.

PostgreSQL's fast path sends statements on the asyncpg connection under SQLAlchemy's
pooled connection; a SQLAlchemy or asyncpg release that renames what it uses fails
here, not in a queue loop that would write outside its transaction.
"""

from __future__ import annotations

import inspect

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy import text
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection

from hipq.store import Store
from hipq.store.asyncpg_adapter import driver_in_transaction, pooled_socket


def test_the_adapter_still_has_the_attributes_used() -> None:
    start = AsyncAdapt_asyncpg_connection._start_transaction
    assert inspect.iscoroutinefunction(start)
    assert list(inspect.signature(start).parameters) == ["self"]
    slots = AsyncAdapt_asyncpg_connection.__slots__
    assert "_transaction" in slots and "isolation_level" in slots
    init = inspect.getsource(AsyncAdapt_asyncpg_connection.__init__)
    assert "self._transaction = None" in init


@pytest.mark.postgres
async def test_the_driver_runs_inside_the_transaction_sqlalchemy_began(
    postgres_url_fresh: str,
) -> None:
    store = Store.from_url(postgres_url_fresh)
    try:
        async with store.engine.connect() as conn:
            await conn.begin()
            driver = await driver_in_transaction(conn)
            assert isinstance(driver, asyncpg.Connection)
            assert driver.is_in_transaction()
            # The driver's statements and SQLAlchemy's share the one transaction.
            await driver.execute("CREATE TEMP TABLE adapter_probe (n int) ON COMMIT DROP")
            await driver.execute("INSERT INTO adapter_probe VALUES (1)")
            seen = (await conn.execute(text("SELECT count(*) FROM adapter_probe"))).scalar()
            assert seen == 1
            assert await driver_in_transaction(conn) is driver  # begun once
            raw = await conn.get_raw_connection()
            sock = pooled_socket(raw.dbapi_connection)
            assert sock is not None and sock.fileno() >= 0
            assert sock.fileno() == driver._transport.get_extra_info("socket").fileno()
            await conn.rollback()
            assert not driver.is_in_transaction()
    finally:
        await store.close()
