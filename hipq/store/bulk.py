"""Operators' bulk operations: one verb on every job a filter matches.

Safe for a million matching jobs: an operation is a row (``hipq_bulk_operations``)
and is carried out in steps. Each step is one short transaction that takes the next
``limit`` matching jobs by id after the operation's ``cursor``, changes them with a
few set-wise statements, and advances the cursor and the counts in the same commit,
so no transaction holds locks for long, the progress is visible to every process, and
a step lost to a crash is simply done again by the next one (any process's runner).

Jobs in flight are not changed here: each gets the operator's request, which its
queue's loop applies at its next tick (``hipq.operator_requests``), as one job's verb.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from hipq.lifecycle import IN_FLIGHT, State
from hipq.operator_requests import OperatorRequest, Reschedule
from hipq.store import state_guards as guards
from hipq.store.dependencies import wait_again
from hipq.store.labels import label_value
from hipq.store.records import NotFound
from hipq.store.schema import attempts, bulk_operations, jobs
from hipq.store.state_guards import Guard
from hipq.store.transactions import Transactions
from hipq.store.wakeup import cancels_payload, jobs_payload

ACTIONS = ("cancel", "retry", "reschedule", "complete", "fail", "delete")


@dataclass(frozen=True, slots=True)
class BulkFilter:
    """Which jobs a bulk operation touches; every given condition must hold."""

    queue: str | None = None
    states: tuple[str, ...] = ()
    type: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    ids: tuple[int, ...] = ()
    job_key: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    error_contains: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v not in (None, (), {})}
        for k, v in out.items():
            if isinstance(v, datetime):
                out[k] = v.isoformat()
            elif isinstance(v, tuple):
                out[k] = list(v)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BulkFilter:
        values: dict[str, Any] = dict(data)
        for k in ("created_after", "created_before", "finished_after", "finished_before"):
            if values.get(k):
                values[k] = datetime.fromisoformat(values[k])
        for k in ("states", "ids"):
            if k in values:
                values[k] = tuple(values[k])
        return cls(**values)

    def conditions(self) -> list[Any]:
        c = jobs.c
        out: list[Any] = []
        if self.queue:
            out.append(c.queue == self.queue)
        if self.states:
            out.append(c.state.in_(self.states))
        if self.type:
            out.append(c.type == self.type)
        for name, value in self.labels.items():
            out.append(label_value(c.labels, name) == value)
        if self.ids:
            out.append(c.id.in_(self.ids))
        if self.job_key:
            out.append(c.job_key == self.job_key)
        if self.created_after:
            out.append(c.created_at >= self.created_after)
        if self.created_before:
            out.append(c.created_at < self.created_before)
        if self.finished_after:
            out.append(c.finished_at >= self.finished_after)
        if self.finished_before:
            out.append(c.finished_at < self.finished_before)
        if self.error_contains:
            out.append(c.last_error.contains(self.error_contains, autoescape=True))
        return out


@dataclass(frozen=True, slots=True)
class BulkOperation:
    id: int
    action: str
    filter: dict[str, Any]
    params: dict[str, Any]
    state: str  # running | done | failed
    cursor: int
    matched: int  # jobs the filter matched so far
    changed: int  # changed at once
    requested: int  # in flight: asked of their loop
    skipped: int  # in a state the verb does not apply to, or a key held by an open job
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class BulkTable(Transactions):
    async def bulk_count(self, flt: BulkFilter) -> int:
        """How many jobs ``flt`` matches now (a dry run)."""
        query = select(func.count()).select_from(jobs).where(*flt.conditions())
        async with self._read() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def bulk_create(
        self, action: str, flt: BulkFilter, params: dict[str, Any], now: datetime
    ) -> BulkOperation:
        if action not in ACTIONS:
            raise ValueError(f"unknown bulk action {action!r}")
        row: dict[str, Any] = {
            "action": action,
            "filter": flt.to_json(),
            "params": params,
            "state": "running",
            "cursor": 0,
            "matched": 0,
            "changed": 0,
            "requested": 0,
            "skipped": 0,
            "created_at": now,
            "updated_at": now,
        }
        async with self._write() as conn:
            stmt = bulk_operations.insert().returning(bulk_operations.c.id)
            op_id = (await conn.execute(stmt, row)).scalar_one()
        return BulkOperation(id=op_id, error=None, finished_at=None, **row)

    async def bulk_get(self, op_id: int) -> BulkOperation:
        async with self._read() as conn:
            row = (
                await conn.execute(select(bulk_operations).where(bulk_operations.c.id == op_id))
            ).first()
        if row is None:
            raise NotFound(f"bulk operation {op_id} does not exist", field="id")
        return BulkOperation(**row._asdict())

    async def bulk_list(self, limit: int = 100) -> list[BulkOperation]:
        query = select(bulk_operations).order_by(bulk_operations.c.id.desc()).limit(limit)
        async with self._read() as conn:
            return [BulkOperation(**r._asdict()) for r in (await conn.execute(query)).all()]

    async def bulk_running(self) -> list[int]:
        """The ids of the operations still under way, oldest first."""
        query = (
            select(bulk_operations.c.id)
            .where(bulk_operations.c.state == "running")
            .order_by(bulk_operations.c.id)
        )
        async with self._read() as conn:
            return list((await conn.execute(query)).scalars())

    async def bulk_step(self, op_id: int, limit: int, now: datetime) -> BulkOperation:
        """One step of the operation: the next ``limit`` matching jobs, in one
        transaction; the operation as it stands after it."""
        async with self._write() as conn:
            row = (
                await conn.execute(
                    self.dialect.for_update(
                        select(bulk_operations).where(bulk_operations.c.id == op_id)
                    )
                )
            ).first()
            if row is None:
                raise NotFound(f"bulk operation {op_id} does not exist", field="id")
            op = BulkOperation(**row._asdict())
            if op.state != "running":
                return op
            flt = BulkFilter.from_json(op.filter)
            query = (
                select(jobs.c.id, jobs.c.state, jobs.c.queue, jobs.c.retry)
                .where(jobs.c.id > op.cursor, *flt.conditions())
                .order_by(jobs.c.id)
                .limit(limit)
            )
            found = (await conn.execute(self.dialect.for_update(query))).all()
            changed, requested = await self._apply(conn, op, found, now)
            values: dict[str, Any] = {
                "matched": op.matched + len(found),
                "changed": op.changed + changed,
                "requested": op.requested + requested,
                "skipped": op.skipped + len(found) - changed - requested,
                "updated_at": now,
            }
            if found:
                values["cursor"] = found[-1].id
            if len(found) < limit:
                values.update(state="done", finished_at=now)
            await conn.execute(
                update(bulk_operations).where(bulk_operations.c.id == op_id).values(values)
            )
        return await self.bulk_get(op_id)

    async def bulk_fail(self, op_id: int, error: str, now: datetime) -> None:
        """End an operation that cannot go on (its steps keep failing)."""
        async with self._write() as conn:
            await conn.execute(
                update(bulk_operations)
                .where(bulk_operations.c.id == op_id, bulk_operations.c.state == "running")
                .values(state="failed", error=error, updated_at=now, finished_at=now)
            )

    async def _apply(
        self, conn: AsyncConnection, op: BulkOperation, found: Sequence[Any], now: datetime
    ) -> tuple[int, int]:
        """Apply the operation's verb to the jobs found: (changed now, requested)."""
        p = op.params
        reschedule = _reschedule(p) if op.action in ("reschedule", "retry") else None
        request = {
            "cancel": OperatorRequest("cancel", reason=p.get("reason")),
            "complete": OperatorRequest("complete", result=p.get("result")),
            "fail": OperatorRequest("fail", reason=p.get("reason")),
            "reschedule": OperatorRequest("reschedule", reschedule=reschedule),
        }.get(op.action)
        in_flight = [r for r in found if State(r.state) in IN_FLIGHT]
        requested = 0
        if request is not None and in_flight:
            await conn.execute(
                update(jobs)
                .where(jobs.c.id.in_([r.id for r in in_flight]), guards.REQUEST.sql(jobs.c.state))
                .values(cancel_requested=True, operator_request=request.to_json(), updated_at=now)
            )
            requested = len(in_flight)  # locked by this step: none changed state meanwhile
            await self._notify(conn, {cancels_payload(r.queue) for r in in_flight})
        if op.action == "delete":
            ids = [r.id for r in found if State(r.state) not in IN_FLIGHT | {State.SCHEDULED}]
            if ids:
                await conn.execute(delete(attempts).where(attempts.c.job_id.in_(ids)))
                await conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
            return len(ids), requested
        guard, values = _at_once(op.action, p, now)
        rows = [r for r in found if State(r.state) in guard.sources]
        if not rows:
            return 0, requested
        params = [
            # A job whose retry strategy refuses the new max_attempts keeps its retry.
            {"b_id": r.id, **(reschedule.columns(r.retry, strict=False) if reschedule else {})}
            for r in rows
        ]
        changed = await self._update_each(conn, guard, values, params)
        if guard.target == State.SCHEDULED:
            # Those that wait for jobs not ended yet wait again.
            await wait_again(conn, [r.id for r in rows], now)
            await self._notify(conn, {jobs_payload(r.queue) for r in rows})
        return changed, requested

    async def _update_each(
        self,
        conn: AsyncConnection,
        guard: Guard,
        values: dict[str, Any],
        params: list[dict[str, Any]],
    ) -> int:
        """The guarded update of every row; a row whose correlation or job key an open
        job holds now (a retry) is skipped, not the whole step."""
        columns: dict[str, Any] = {k: bindparam(f"v_{k}") for k in params[0] if k != "b_id"}
        stmt = (
            update(jobs)
            .where(jobs.c.id == bindparam("b_id"), guard.sql(jobs.c.state))
            .values(**values, **columns)
        )
        bound = [{("b_id" if k == "b_id" else f"v_{k}"): v for k, v in p.items()} for p in params]
        # The rows are locked by this step and their states checked: each one updated is
        # changed (an executemany's row count is not reported by every driver).
        try:
            async with conn.begin_nested():
                await conn.execute(stmt, bound)
            return len(bound)
        except IntegrityError:
            changed = 0
            for one in bound:
                try:
                    async with conn.begin_nested():
                        await conn.execute(stmt, [one])
                    changed += 1
                except IntegrityError:
                    continue
            return changed


def _reschedule(p: dict[str, Any]) -> Reschedule:
    run_at = p.get("run_at")
    return Reschedule(
        run_at=datetime.fromisoformat(run_at) if run_at else None,
        priority=p.get("priority"),
        reset_attempts=bool(p.get("reset_attempts")),
        max_attempts=p.get("max_attempts"),
    )


def _at_once(action: str, p: dict[str, Any], now: datetime) -> tuple[Guard, dict[str, Any]]:
    """The guard and the values of the verb on the jobs it changes at once."""
    ended = {"finished_at": now, "updated_at": now, "waiting_reason": None}
    if action == "cancel":
        return guards.CANCEL, {
            **ended,
            "state": State.CANCELLED.value,
            "last_error": p.get("reason"),
        }
    if action == "complete":
        return guards.COMPLETE, {**ended, "state": State.COMPLETED.value, "result": p.get("result")}
    if action == "fail":
        return guards.FAIL, {**ended, "state": State.FAILED.value, "last_error": p.get("reason")}
    run_at = p.get("run_at")
    again = {
        "state": State.SCHEDULED.value,
        "run_at": datetime.fromisoformat(run_at) if run_at else now,
        "finished_at": None,
        "updated_at": now,
        "cancel_requested": False,
        "operator_request": None,
        "waiting_reason": None,
    }
    return (guards.RETRY if action == "retry" else guards.RESCHEDULE), again
