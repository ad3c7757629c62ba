"""Alembic environment of hipq: one migration chain for SQLite and PostgreSQL.

``hipq migrate`` hands over an open connection (config.attributes["connection"]);
run by hand, alembic connects to ``HIPQ_DATABASE_URL`` or the ini's url.
"""

import asyncio
import os

from alembic import context
from hipq.store.dialects import create_engine
from hipq.store.schema import metadata

config = context.config


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    # render_as_batch: SQLite can only ALTER tables by copying them.
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        version_table="hipq_alembic_version",
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_online(url: str) -> None:
    engine = create_engine(url)
    async with engine.connect() as conn:
        await conn.run_sync(_run)
        await conn.commit()
    await engine.dispose()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    asyncio.run(
        _run_online(os.environ.get("HIPQ_DATABASE_URL") or config.get_main_option("sqlalchemy.url"))
    )
