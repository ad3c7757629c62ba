"""Operators' verbs on single jobs: cancel, complete, fail, reschedule, delete, and
looking a job up by its job_key.

A scheduled (or finished) job is changed here at once, under a guarded update. A job
in flight belongs to its queue's loop: the verb is stored as a request on the job
(``hipq.operator_requests``) and the loop, woken, applies it at its next tick.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.jobs import Job
from hipq.lifecycle import IN_FLIGHT, TERMINAL, State
from hipq.operator_requests import OperatorRequest, Reschedule
from hipq.store import state_guards as guards
from hipq.store.dependencies import wait_again
from hipq.store.records import Conflict, NotFound
from hipq.store.rows import conflict_from, row_to_job
from hipq.store.schema import attempts, jobs
from hipq.store.state_guards import OPEN_SQL, const
from hipq.store.transactions import Transactions
from hipq.store.wakeup import cancels_payload, jobs_payload


class OperatorTable(Transactions):
    async def job_cancel(self, job_id: int, now: datetime, reason: str | None = None) -> Job:
        """Cancel a scheduled job now; ask the loop to cancel one in flight."""
        async with self._write() as conn:
            return await self._cancel(conn, job_id, now, reason)

    async def _cancel(
        self, conn: AsyncConnection, job_id: int, now: datetime, reason: str | None
    ) -> Job:
        """``job_cancel`` inside the caller's transaction (a schedule's cancel_other)."""
        job = await self._job_locked(conn, job_id)
        if job.state in guards.CANCEL.sources:
            values = _ended(State.CANCELLED, now, last_error=reason)
            return await self._job_update_guarded(conn, job_id, guards.CANCEL, values)
        if job.state in IN_FLIGHT:
            return await self._job_request(conn, job, OperatorRequest("cancel", reason=reason), now)
        raise Conflict(
            f"job {job_id} is {job.state}; only open jobs can be cancelled", field="state"
        )

    async def job_complete(self, job_id: int, now: datetime, result: Any = None) -> Job:
        """Complete an open job with ``result`` (one in flight: at its loop's next tick)."""
        async with self._write() as conn:
            job = await self._job_locked(conn, job_id)
            if job.state in guards.COMPLETE.sources:
                values = _ended(State.COMPLETED, now, result=result)
                return await self._job_update_guarded(conn, job_id, guards.COMPLETE, values)
            if job.state in IN_FLIGHT:
                return await self._job_request(conn, job, OperatorRequest("complete", result), now)
            raise Conflict(
                f"job {job_id} is {job.state}; only open jobs can be completed", field="state"
            )

    async def job_fail(self, job_id: int, now: datetime, reason: str) -> Job:
        """Fail an open job for good with ``reason``; no retry strategy is asked."""
        async with self._write() as conn:
            job = await self._job_locked(conn, job_id)
            if job.state in guards.FAIL.sources:
                values = _ended(State.FAILED, now, last_error=reason)
                return await self._job_update_guarded(conn, job_id, guards.FAIL, values)
            if job.state in IN_FLIGHT:
                request = OperatorRequest("fail", reason=reason)
                return await self._job_request(conn, job, request, now)
            raise Conflict(
                f"job {job_id} is {job.state}; only open jobs can be failed", field="state"
            )

    async def job_reschedule(self, job_id: int, now: datetime, change: Reschedule) -> Job:
        """Run a scheduled, failed or cancelled job at ``change.run_at`` (now if None),
        with the priority, attempt count and max_attempts it gives; a job in flight
        is put back to wait by its loop (its attempt ends, not counted as a failure)."""
        try:
            async with self._write() as conn:
                job = await self._job_locked(conn, job_id)
                if job.state in IN_FLIGHT:
                    change.columns(job.retry)  # refuses a retry that would not load
                    request = OperatorRequest("reschedule", reschedule=change)
                    return await self._job_request(conn, job, request, now)
                if job.state not in guards.RESCHEDULE.sources:
                    raise Conflict(
                        f"job {job_id} is {job.state}; "
                        "only open, failed or cancelled jobs can be rescheduled",
                        field="state",
                    )
                values = {
                    **change.columns(job.retry),
                    "state": State.SCHEDULED.value,
                    "run_at": change.run_at or now,
                    "finished_at": None,
                    "updated_at": now,
                    "cancel_requested": False,
                    "operator_request": None,
                    "waiting_reason": None,
                }
                job = await self._job_update_guarded(conn, job_id, guards.RESCHEDULE, values)
                if job.after or job.waiting_for:  # it waits again for what has not ended
                    await wait_again(conn, [job_id], now)
                    job = await self._job_locked(conn, job_id)
                await self._notify(conn, {jobs_payload(job.queue)})
                return job
        except IntegrityError as exc:  # its correlation or job key is held by an open job
            raise conflict_from(exc) from None

    async def job_delete(self, job_id: int) -> Job:
        """Delete a finished job and its attempts; returns it as it was."""
        async with self._write() as conn:
            job = await self._job_locked(conn, job_id)
            if job.state not in TERMINAL:
                raise Conflict(
                    f"job {job_id} is {job.state}; only finished jobs can be deleted "
                    "(cancel it first)",
                    field="state",
                )
            await conn.execute(delete(attempts).where(attempts.c.job_id == job_id))
            await conn.execute(
                delete(jobs).where(
                    jobs.c.id == job_id, jobs.c.state.in_([const(s.value) for s in TERMINAL])
                )
            )
            return job

    async def job_by_key(self, job_key: str, tenant: str = "") -> Job:
        """The open job of ``tenant`` ('': the service) that holds ``job_key``."""
        query = select(jobs).where(
            jobs.c.job_key == job_key, jobs.c.tenant == tenant, jobs.c.state.in_(OPEN_SQL)
        )
        async with self._read() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            raise NotFound(f"no open job has job_key {job_key!r}", field="job_key")
        return row_to_job(row)

    async def _job_request(
        self, conn: AsyncConnection, job: Job, request: OperatorRequest, now: datetime
    ) -> Job:
        """Store ``request`` on the in-flight ``job`` and wake its loop; a later request
        replaces an earlier one that the loop has not applied yet."""
        await conn.execute(
            update(jobs)
            .where(jobs.c.id == job.id, guards.REQUEST.sql(jobs.c.state))
            .values(cancel_requested=True, operator_request=request.to_json(), updated_at=now)
        )
        await self._notify(conn, {cancels_payload(job.queue)})
        return await self._job_locked(conn, job.id)


def _ended(state: State, now: datetime, **values: Any) -> dict[str, Any]:
    return {
        "state": state.value,
        "finished_at": now,
        "updated_at": now,
        "waiting_reason": None,
        **values,
    }
