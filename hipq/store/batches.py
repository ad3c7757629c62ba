"""The batches table (hipq.batches): made with its jobs, read by the API; its counts
are kept by a trigger on hipq_jobs (alembic 0022), not here."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.batches import Batch, NewBatch
from hipq.store.records import NotFound
from hipq.store.schema import batches
from hipq.store.transactions import Transactions

_FIELDS = tuple(f.name for f in fields(Batch))


async def batch_create(conn: AsyncConnection, new: NewBatch, total: int, now: datetime) -> int:
    completion = new.completion
    stmt = (
        batches.insert()
        .values(
            total=total,
            completed=0,
            failed=0,
            cancelled=0,
            on_complete=completion.type if completion else None,
            notify=completion.notify if completion else None,
            created_at=now,
        )
        .returning(batches.c.id)
    )
    return int((await conn.execute(stmt)).scalar_one())


async def batch_set_completion(conn: AsyncConnection, batch_id: int, job_id: int) -> None:
    await conn.execute(
        update(batches).where(batches.c.id == batch_id).values(completion_job_id=job_id)
    )


class BatchTable(Transactions):
    async def batch_get(self, batch_id: int) -> Batch:
        async with self._read() as conn:
            row = (await conn.execute(select(batches).where(batches.c.id == batch_id))).first()
        if row is None:
            raise NotFound(f"batch {batch_id} does not exist")
        return Batch(**{name: getattr(row, name) for name in _FIELDS})
