"""PostgreSQL statements run on the asyncpg connection itself, for the hottest paths.

SQLAlchemy Core costs a statement about 0.4 ms of CPU here (building the parameters,
the greenlet hop, the cursor adapter); asyncpg alone about a third of that. A
``DriverStatement`` is a ``text()`` statement compiled once for asyncpg (``$n``
placeholders and the order of its parameters); ``fetch`` runs it on the pooled
connection's driver connection, where asyncpg keeps it prepared.

Errors keep the store's contract, raised as SQLAlchemy raises asyncpg's: a violated
constraint as ``IntegrityError`` (``hipq.store.rows.conflict_from`` reads it), any
other error the server reports as ``DBAPIError``, and a lost connection as an
``OperationalError`` marked invalidated (the pool's checkout ping replaces it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import TextClause

_DIALECT = asyncpg_dialect()


class DriverStatement:
    """A ``text()`` statement compiled once for asyncpg."""

    def __init__(self, statement: TextClause) -> None:
        compiled = statement.compile(dialect=_DIALECT)
        self.sql = str(compiled)
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())

    def arguments(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]

    async def fetch(self, conn: AsyncConnection, params: Mapping[str, Any]) -> list[Any]:
        """Run on ``conn``'s driver connection, outside any transaction (a statement
        that commits on its own: SQLAlchemy has begun nothing on ``conn``); the rows
        (asyncpg ``Record``s). Inside a transaction SQLAlchemy began, see
        ``Dialect.driver_connection``."""
        driver: Any = (await conn.get_raw_connection()).driver_connection
        try:
            return list(await driver.fetch(self.sql, *self.arguments(params)))
        except asyncpg.IntegrityConstraintViolationError as exc:
            raise sa_exc.IntegrityError(self.sql, None, exc) from exc
        except asyncpg.PostgresError as exc:
            raise sa_exc.DBAPIError(self.sql, None, exc) from exc
        except (asyncpg.InterfaceError, OSError) as exc:
            # The connection is gone; the pool's checkout ping replaces it before reuse.
            raise sa_exc.OperationalError(self.sql, None, exc, connection_invalidated=True) from exc
