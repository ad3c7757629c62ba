"""Applying and checking the alembic migrations from inside hipq (``hipq migrate``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine

from alembic import command

VERSION_TABLE = "hipq_alembic_version"


class SchemaBehind(RuntimeError):
    """The database schema is older than this hipq: run `hipq migrate`."""


def script_location() -> Path:
    """The migrations: inside the wheel (hipq/migrations) or the repository's alembic/."""
    packaged = Path(__file__).parents[1] / "migrations"
    if (packaged / "env.py").exists():
        return packaged
    return Path(__file__).parents[2] / "alembic"


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    return cfg


def head_revision() -> str:
    return ScriptDirectory.from_config(_config()).get_current_head() or ""


async def current_revision(engine: AsyncEngine) -> str | None:
    def read(sync_conn) -> str | None:  # type: ignore[no-untyped-def]
        ctx = MigrationContext.configure(sync_conn, opts={"version_table": VERSION_TABLE})
        return ctx.get_current_revision()

    async with engine.connect() as conn:
        return await conn.run_sync(read)


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    cfg = _config()

    def run(sync_conn) -> None:  # type: ignore[no-untyped-def]
        cfg.attributes["connection"] = sync_conn
        command.upgrade(cfg, revision)

    async with engine.connect() as conn:
        await conn.execution_options(hipq_write=True)
        await conn.run_sync(run)
        await conn.commit()


async def ensure_current(engine: AsyncEngine, migrate: bool) -> None:
    """Migrate (when configured) or refuse a schema that is behind this hipq."""
    head, current = head_revision(), await current_revision(engine)
    if current == head:
        return
    if migrate:
        await upgrade(engine)
        return
    raise SchemaBehind(
        f"the database schema is at {current or 'nothing'}, this hipq needs {head}: "
        "run `hipq migrate` (or set migrate_on_start: true)"
    )


async def differences(engine: AsyncEngine) -> list[Any]:
    """What the database's schema lacks or has beyond the tables hipq declares
    (``hipq.store.schema``), as alembic's autogenerate compares them; empty when
    they agree."""
    from alembic.autogenerate import compare_metadata

    from hipq.store.schema import metadata

    def compare(sync_conn) -> list[Any]:  # type: ignore[no-untyped-def]
        ctx = MigrationContext.configure(
            sync_conn, opts={"version_table": VERSION_TABLE, "compare_type": True}
        )
        return list(compare_metadata(ctx, metadata))

    async with engine.connect() as conn:
        return await conn.run_sync(compare)
