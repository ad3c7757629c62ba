"""The outbox of outcome notifications (``hipq_notifications``), the notifier's side.

Rows are written by the jobs table's trigger (alembic 0012) in the transaction that
ends a job; here they are taken to be sent, and their tries recorded. Taking a row
leases it to this process for a while (``locked_until``): on PostgreSQL several
processes take rows at once, each skipping the rows another holds, so one
notification is sent by one process at a time; a process that dies mid-send leaves
its rows to the others once the lease ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import bindparam, or_, select, update

from hipq.outbox import FAILING, SENT, Delivery, Notification
from hipq.store.records import NotFound
from hipq.store.schema import jobs, notifications
from hipq.store.state_guards import const
from hipq.store.transactions import Transactions

_NOT_SENT = notifications.c.status != const(SENT)  # the due index's predicate


def _row(row: object) -> Notification:
    return Notification(**row._asdict())  # type: ignore[attr-defined]


class NotificationTable(Transactions):
    async def notification_take(
        self, now: datetime, limit: int, lease_seconds: float
    ) -> list[Notification]:
        """Due notifications, oldest first, leased to the caller for ``lease_seconds``."""
        query = (
            select(notifications)
            .where(
                _NOT_SENT,
                notifications.c.next_attempt_at <= now,
                or_(notifications.c.locked_until.is_(None), notifications.c.locked_until <= now),
            )
            .order_by(notifications.c.next_attempt_at, notifications.c.id)
            .limit(limit)
        )
        # Most steps find nothing: a read first, so that they take no write lock (SQLite).
        async with self._read() as conn:
            if (await conn.execute(query.with_only_columns(notifications.c.id))).first() is None:
                return []
        async with self._write() as conn:
            taken = [_row(r) for r in (await conn.execute(self.dialect.skip_locked(query))).all()]
            if taken:
                await conn.execute(
                    update(notifications)
                    .where(notifications.c.id.in_([n.id for n in taken]))
                    .values(locked_until=now + timedelta(seconds=lease_seconds))
                )
        return taken

    async def notification_record(self, deliveries: Sequence[Delivery], now: datetime) -> None:
        """Record a step's tries: sent, or failing with the error and the next try's time."""
        sent = [d.id for d in deliveries if d.error is None]
        failed = [d for d in deliveries if d.error is not None]
        async with self._write() as conn:
            if sent:
                await conn.execute(
                    update(notifications)
                    .where(notifications.c.id.in_(sent), _NOT_SENT)
                    .values(
                        status=SENT,
                        attempts=notifications.c.attempts + 1,
                        sent_at=now,
                        locked_until=None,
                    )
                )
            if failed:
                await conn.execute(
                    update(notifications)
                    .where(notifications.c.id == bindparam("b_id"), _NOT_SENT)
                    .values(
                        status=FAILING,
                        attempts=notifications.c.attempts + 1,
                        last_error=bindparam("b_error"),
                        next_attempt_at=bindparam("b_retry_at"),
                        locked_until=None,
                    ),
                    [
                        {"b_id": d.id, "b_error": (d.error or "")[:1000], "b_retry_at": d.retry_at}
                        for d in failed
                    ],
                )

    async def notification_list(
        self,
        job_id: int | None = None,
        status: str | None = None,
        after_id: int | None = None,
        limit: int = 100,
        batch_id: int | None = None,
    ) -> list[Notification]:
        """Notifications, newest first; of one job or batch, in one status, before
        ``after_id``."""
        query = select(notifications).order_by(notifications.c.id.desc()).limit(limit)
        if job_id is not None:
            query = query.where(notifications.c.job_id == job_id)
        if batch_id is not None:
            query = query.where(notifications.c.batch_id == batch_id)
        if status is not None:
            query = query.where(notifications.c.status == status)
        if after_id is not None:
            query = query.where(notifications.c.id < after_id)
        async with self._read() as conn:
            return [_row(r) for r in (await conn.execute(query)).all()]

    async def notification_of_job(self, job_id: int) -> list[Notification]:
        """A job's notifications, oldest first; ``NotFound`` if neither job nor any exists."""
        query = (
            select(notifications)
            .where(notifications.c.job_id == job_id)
            .order_by(notifications.c.id)
        )
        async with self._read() as conn:
            rows = [_row(r) for r in (await conn.execute(query)).all()]
            if not rows:
                found = await conn.execute(select(jobs.c.id).where(jobs.c.id == job_id))
                if found.first() is None:
                    raise NotFound(f"job {job_id} does not exist", field="id")
        return rows
