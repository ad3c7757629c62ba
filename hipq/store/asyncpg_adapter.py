"""Every private SQLAlchemy and asyncpg attribute the PostgreSQL fast path uses, here
and nowhere else.

The queue loop's statements and the one-statement inserts run on the asyncpg
connection under SQLAlchemy's pooled connection (``hipq.store.tick_sql``,
``hipq.store.driver``); the pool's cheap liveness check looks at the asyncpg
socket. None of that is public API: tests/store/test_asyncpg_adapter.py fails the
day one of these attributes changes, and a missing one raises here at once rather
than sending a statement outside its transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection


class AdapterChanged(RuntimeError):
    """SQLAlchemy's asyncpg adapter or asyncpg no longer has what hipq relies on."""


async def driver_in_transaction(conn: AsyncConnection) -> Any:
    """The asyncpg connection under ``conn``, inside the transaction ``conn`` began,
    begun on the server now.

    SQLAlchemy's asyncpg adapter sends BEGIN with the first statement it runs: a
    statement sent on the asyncpg connection before that would run outside the
    transaction, so the adapter's own ``_start_transaction`` begins it here."""
    raw = await conn.get_raw_connection()
    adapter: Any = raw.dbapi_connection
    try:
        start = adapter._start_transaction
        if adapter.isolation_level == "autocommit":
            raise AdapterChanged("a transaction on the driver needs a non-autocommit connection")
        if adapter._transaction is None:
            await start()
        if adapter._transaction is None:
            raise AdapterChanged("the adapter's _start_transaction began no transaction")
    except AttributeError as exc:
        raise AdapterChanged(f"SQLAlchemy's asyncpg adapter changed: {exc}") from exc
    return raw.driver_connection


def pooled_socket(dbapi_conn: Any) -> Any | None:
    """The socket (asyncio's ``TransportSocket``, with ``fileno``) of the asyncpg
    connection under a pool's DBAPI connection (SQLAlchemy's adapter, as pool events
    get it); None if it is closed or has none."""
    try:
        driver = dbapi_conn._connection
        transport = driver._transport
    except AttributeError:
        return None
    if transport is None or driver.is_closed():
        return None
    return transport.get_extra_info("socket")
