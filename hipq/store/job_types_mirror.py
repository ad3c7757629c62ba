"""The config's job types and queues, mirrored into the database.

Jobs added inside an application's own transaction (the SQL function
``hipq_add_job``, or ``hipq.transactional`` on SQLite) are resolved and checked by
the database, which cannot read hipq's YAML. Each starting hipq process writes what
intake needs into ``hipq_job_types`` and ``hipq_queue_capacities``: the mirror is
exactly the config of the process that wrote it last. Processes with the same
config write the same rows, so the order they start in does not matter; a process
whose config differs replaces the rows, and the change it made is returned so that
it can be logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Table, delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.store.schema import job_types_mirror, queues_mirror
from hipq.store.transactions import Transactions


@dataclass(frozen=True, slots=True)
class MirroredJobType:
    """What intake needs of a job type: its defaults and its correlation key template."""

    name: str
    queue: str
    priority: int
    weight: int
    timeout_seconds: float
    retry: dict[str, Any]
    correlation_key: str | None = None
    # The template's parts for SQL: {"text": literal} or {"path": [...], "name": placeholder}.
    key_parts: list[dict[str, Any]] | None = None
    key_at_dispatch: bool = False
    # The labels its jobs start with (a job's own values win), and where their outcome
    # goes (None: nowhere), as ``Intake.resolve`` applies them.
    labels: dict[str, str] = field(default_factory=dict)
    notify: list[str] | None = None


@dataclass(frozen=True, slots=True)
class MirroredQueue:
    name: str
    concurrency: int | None  # capacity units; None is unlimited


@dataclass(frozen=True, slots=True)
class MirrorChange:
    """What a write changed, by name: rows another config (or an earlier version of
    this one) had written differently or not at all."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


@dataclass(frozen=True, slots=True)
class MirrorChanges:
    job_types: MirrorChange
    queues: MirrorChange


class JobTypesMirror(Transactions):
    async def job_types_mirror_write(
        self,
        job_types: Sequence[MirroredJobType],
        queues: Sequence[MirroredQueue],
        writer: str,
        now: datetime,
    ) -> MirrorChanges:
        """Make the mirror exactly ``job_types`` and ``queues``, in one transaction."""
        async with self._write() as conn:
            await self.dialect.lock_mirror(conn)  # writers take turns
            types_change = await _replace(
                conn,
                self.dialect.insert,
                job_types_mirror,
                [asdict(t) for t in job_types],
                writer,
                now,
            )
            queues_change = await _replace(
                conn, self.dialect.insert, queues_mirror, [asdict(q) for q in queues], writer, now
            )
        return MirrorChanges(types_change, queues_change)

    async def job_types_mirror_read(
        self,
    ) -> tuple[dict[str, MirroredJobType], dict[str, MirroredQueue]]:
        """The mirror as stored: job types and queues by name."""
        async with self._read() as conn:
            types = await _rows(conn, job_types_mirror)
            queues = await _rows(conn, queues_mirror)
        return (
            {r["name"]: MirroredJobType(**r) for r in types},
            {r["name"]: MirroredQueue(**r) for r in queues},
        )


_BOOKKEEPING = ("written_by", "written_at")


async def _rows(conn: AsyncConnection, table: Table) -> list[dict[str, Any]]:
    result = await conn.execute(select(table).order_by(table.c.name))
    return [{k: v for k, v in row._mapping.items() if k not in _BOOKKEEPING} for row in result]


async def _replace(
    conn: AsyncConnection,
    insert: Any,
    table: Table,
    wanted: list[dict[str, Any]],
    writer: str,
    now: datetime,
) -> MirrorChange:
    stored: Mapping[str, dict[str, Any]] = {r["name"]: r for r in await _rows(conn, table)}
    by_name = {r["name"]: r for r in wanted}
    removed = sorted(set(stored) - set(by_name))
    added = sorted(set(by_name) - set(stored))
    changed = sorted(n for n in set(by_name) & set(stored) if stored[n] != by_name[n])
    if removed:
        await conn.execute(delete(table).where(table.c.name.in_(removed)))
    writes = [{**by_name[n], "written_by": writer, "written_at": now} for n in added + changed]
    if writes:
        stmt = insert(table)
        update = {c.name: stmt.excluded[c.name] for c in table.c if c.name != "name"}
        await conn.execute(stmt.on_conflict_do_update(index_elements=["name"], set_=update), writes)
    return MirrorChange(added, changed, removed)
