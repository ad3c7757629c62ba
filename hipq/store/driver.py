"""PostgreSQL statements run on the asyncpg connection itself, for the hottest paths.

SQLAlchemy Core costs a statement about 0.4 ms of CPU here (building the parameters,
the greenlet hop, the cursor adapter); asyncpg alone about a third of that. A
``DriverStatement`` is a SQLAlchemy statement (Core or ``text()``) compiled once for
asyncpg (``$n`` placeholders and the order of its parameters); ``fetch`` runs it on
the pooled connection's driver connection, where asyncpg keeps it prepared.

Errors keep the store's contract, raised as SQLAlchemy raises asyncpg's: a violated
constraint as ``IntegrityError`` (``hipq.store.rows.conflict_from`` reads it), any
other error the server reports as ``DBAPIError``, and a lost connection as an
``OperationalError`` marked invalidated (the pool's checkout ping replaces it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import ARRAY, BigInteger, bindparam, func
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ClauseElement

_DIALECT = asyncpg_dialect()


def any_of(column: Any, name: str, ids: list[int] | None = None) -> Any:
    """``column = ANY(:name)``, an array of ids: one parameter whatever their number,
    and one plan."""
    return column == func.any(bindparam(name, ids, type_=ARRAY(BigInteger)))


class DriverStatement:
    """A SQLAlchemy statement compiled once for asyncpg.

    Its values are sent as given: no SQLAlchemy type processing (JSON goes as the
    codec SQLAlchemy set on the connection encodes it, instants as aware datetimes).
    Values the statement carries itself (a literal bound by SQLAlchemy, such as
    ``attempt + 1``'s 1) are its defaults."""

    def __init__(self, statement: ClauseElement) -> None:
        compiled: Any = statement.compile(dialect=_DIALECT)
        self.sql = str(compiled)
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())
        self.defaults = {
            name: bind.value
            for name, bind in compiled.binds.items()
            if bind.value is not None and bind.callable is None
        }

    def arguments(self, params: Mapping[str, Any]) -> list[Any]:
        if not self.defaults:
            return [params[name] for name in self.names]
        return [params[n] if n in params else self.defaults[n] for n in self.names]

    async def fetch(self, conn: AsyncConnection, params: Mapping[str, Any]) -> list[Any]:
        """Run on ``conn``'s driver connection, outside any transaction (a statement
        that commits on its own: SQLAlchemy has begun nothing on ``conn``); the rows
        (asyncpg ``Record``s). Inside a transaction SQLAlchemy began, see
        ``hipq.store.asyncpg_adapter.driver_in_transaction``."""
        driver: Any = (await conn.get_raw_connection()).driver_connection
        return await self.fetch_on(driver, params)

    async def fetch_on(self, driver: Any, params: Mapping[str, Any]) -> list[Any]:
        """Run on an asyncpg connection; its rows."""
        try:
            return list(await driver.fetch(self.sql, *self.arguments(params)))
        except _DRIVER_ERRORS as exc:
            raise _as_sqlalchemy_error(self.sql, exc) from exc

    async def execute_on(self, driver: Any, params: Mapping[str, Any]) -> None:
        """Run on an asyncpg connection, its rows (if any) unread."""
        try:
            await driver.execute(self.sql, *self.arguments(params))
        except _DRIVER_ERRORS as exc:
            raise _as_sqlalchemy_error(self.sql, exc) from exc


# What asyncpg raises for a statement: the server's errors, and the connection's own
# (closed, or left mid-operation by a server process that ended under it).
_DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)


def _as_sqlalchemy_error(sql: str, exc: Exception) -> sa_exc.DBAPIError:
    """asyncpg's error as SQLAlchemy raises it."""
    if isinstance(exc, asyncpg.IntegrityConstraintViolationError):
        return sa_exc.IntegrityError(sql, None, exc)
    if isinstance(exc, asyncpg.PostgresError):
        return sa_exc.DBAPIError(sql, None, exc)
    # The connection is gone; the pool's checkout ping replaces it before reuse.
    return sa_exc.OperationalError(sql, None, exc, connection_invalidated=True)
