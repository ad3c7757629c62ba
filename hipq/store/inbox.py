"""The responses inbox and the parked messages, outside the queue loops: intake,
reads, an operator's match by hand, and upkeep's classification and pruning.

The loops match pending responses to their jobs inside ``QueueBatch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.lifecycle import IN_FLIGHT
from hipq.store.records import Conflict, NewResponse, NotFound, ParkedMessage, Response
from hipq.store.schema import jobs, parked_messages, responses
from hipq.store.state_guards import OPEN_VALUES, PENDING_SQL
from hipq.store.transactions import Transactions
from hipq.wakeup import responses_payload


class InboxTable(Transactions):
    async def response_insert_many(
        self,
        new: Sequence[NewResponse],
        now: datetime,
        ttl: float,
        parked: Sequence[ParkedMessage] = (),
    ) -> list[int]:
        """Store responses (and parked messages) durably, in one transaction."""
        expires = now + timedelta(seconds=ttl)
        ids: list[int] = []
        async with self._write() as conn:
            if new:
                rows = [
                    {
                        **asdict(r),
                        "received_at": now,
                        "expires_at": expires,
                        "status": "pending",
                        "job_id": None,
                        "forced_job_id": None,
                        "settled_at": None,
                    }
                    for r in new
                ]
                stmt = responses.insert().returning(responses.c.id, sort_by_parameter_order=True)
                ids = list((await conn.execute(stmt, rows)).scalars().all())
                await self._notify(conn, {responses_payload()})
            if parked:
                await conn.execute(
                    parked_messages.insert(), [{**asdict(p), "received_at": now} for p in parked]
                )
        return ids

    async def response_get(self, response_id: int) -> Response:
        async with self._read() as conn:
            row = (
                await conn.execute(select(responses).where(responses.c.id == response_id))
            ).first()
        if row is None:
            raise NotFound(f"response {response_id} does not exist", field="id")
        return Response(**row._asdict())

    async def response_list(
        self,
        statuses: Sequence[str] = (),
        correlation_key: str | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[Response]:
        query = select(responses).order_by(responses.c.id.desc()).limit(limit)
        if statuses:
            query = query.where(responses.c.status.in_(list(statuses)))
        if correlation_key is not None:
            query = query.where(responses.c.correlation_key == correlation_key)
        if after_id is not None:
            query = query.where(responses.c.id < after_id)
        async with self._read() as conn:
            return [Response(**r._asdict()) for r in (await conn.execute(query)).all()]

    async def response_force_match(self, response_id: int, job_id: int, now: datetime) -> Response:
        """An operator pairs an unmatched response with an in-flight job by hand."""
        async with self._write() as conn:
            row = (
                await conn.execute(select(responses).where(responses.c.id == response_id))
            ).first()
            if row is None:
                raise NotFound(f"response {response_id} does not exist", field="id")
            if row.status not in ("pending", "expired", "late"):
                raise Conflict(f"response {response_id} is {row.status}", field="id")
            job = await self._job_locked(conn, job_id)
            if job.state not in IN_FLIGHT:
                raise Conflict(
                    f"job {job_id} is {job.state}; a response can settle only a running or "
                    "awaiting job",
                    field="job_id",
                )
            await conn.execute(
                update(responses)
                .where(responses.c.id == response_id)
                .values(
                    status="pending",
                    forced_job_id=job_id,
                    expires_at=max(row.expires_at, now + timedelta(hours=1)),
                )
            )
            await self._notify(conn, {responses_payload()})  # look at the inbox
        return await self.response_get(response_id)

    async def parked_list(
        self, after_id: int | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        query = select(parked_messages).order_by(parked_messages.c.id.desc()).limit(limit)
        if after_id is not None:
            query = query.where(parked_messages.c.id < after_id)
        async with self._read() as conn:
            return [r._asdict() for r in (await conn.execute(query)).all()]

    async def response_classify(self, now: datetime, limit: int = 1000) -> dict[str, int]:
        """Upkeep: settle the inbox rows no open job will ever match.

        duplicate: the key's job already has a matched response; late: the key's job
        is finished without one (timed out, cancelled, failed); expired: past the TTL
        with no job at all. Early responses (the job is still scheduled) stay pending.
        """
        counts = {"duplicate": 0, "late": 0, "expired": 0}
        async with self._write() as conn:
            pending = (
                await conn.execute(
                    select(responses.c.id, responses.c.correlation_key, responses.c.expires_at)
                    .where(responses.c.status == PENDING_SQL, responses.c.forced_job_id.is_(None))
                    .order_by(responses.c.id)
                    .limit(limit)
                )
            ).all()
            if not pending:
                return counts
            open_keys, finished, matched_jobs = await _jobs_of_keys(
                conn, list({r.correlation_key for r in pending})
            )
            settled: list[dict[str, Any]] = []
            for r in pending:
                if r.correlation_key in open_keys:
                    continue  # early, or about to be matched by the loop
                if r.correlation_key in finished:
                    job_id = finished[r.correlation_key]
                    status = "duplicate" if job_id in matched_jobs else "late"
                elif r.expires_at <= now:
                    status, job_id = "expired", None
                else:
                    continue  # unknown key: kept until its TTL
                settled.append({"b_id": r.id, "status": status, "job_id": job_id})
                counts[status] += 1
            if settled:
                await conn.execute(
                    update(responses)
                    .where(responses.c.id == bindparam("b_id"))
                    .values(status=bindparam("status"), job_id=bindparam("job_id"), settled_at=now),
                    settled,
                )
        return counts

    async def response_prune(self, before: datetime) -> int:
        """Delete settled inbox rows and parked messages older than ``before``."""
        async with self._write() as conn:
            done = await conn.execute(
                delete(responses).where(
                    responses.c.status != "pending", responses.c.received_at < before
                )
            )
            await conn.execute(
                delete(parked_messages).where(parked_messages.c.received_at < before)
            )
        return done.rowcount or 0


async def _jobs_of_keys(
    conn: AsyncConnection, keys: list[str]
) -> tuple[set[str], dict[str, int], set[int]]:
    """For correlation ``keys``: those an open job holds, the finished job of each
    other key, and which of those finished jobs already had a matched response."""
    job_rows = (
        await conn.execute(
            select(jobs.c.id, jobs.c.correlation_key, jobs.c.state).where(
                jobs.c.correlation_key.in_(keys)
            )
        )
    ).all()
    open_keys = {r.correlation_key for r in job_rows if r.state in OPEN_VALUES}
    finished = {r.correlation_key: r.id for r in job_rows if r.state not in OPEN_VALUES}
    if not finished:
        return open_keys, finished, set()
    matched = await conn.execute(
        select(responses.c.job_id).where(
            responses.c.status == "matched",
            responses.c.job_id.in_(list(finished.values())),
        )
    )
    return open_keys, finished, set(matched.scalars().all())
