"""The responses inbox and the parked messages, outside the queue loops: intake,
reads, an operator's match by hand, and upkeep's classification and pruning.

The loops match pending responses to their jobs inside ``QueueBatch``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, fields
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, and_, bindparam, case, delete, exists, func, or_, select, update
from sqlalchemy.sql.expression import ColumnElement, Exists, FromClause, ScalarSelect

from hipq.lifecycle import IN_FLIGHT
from hipq.store.records import Conflict, NewResponse, NotFound, ParkedMessage, Response
from hipq.store.schema import jobs, parked_messages, responses
from hipq.store.state_guards import OPEN_SQL, PENDING_SQL
from hipq.store.transactions import Transactions
from hipq.store.wakeup import responses_payload

_NEW_RESPONSE_FIELDS = tuple(f.name for f in fields(NewResponse))


def response_rows(
    new: Sequence[NewResponse], now: datetime, expires: datetime
) -> list[dict[str, Any]]:
    # A plain dict by hand: dataclasses.asdict deep-copies every body and header.
    return [
        {
            **{name: getattr(r, name) for name in _NEW_RESPONSE_FIELDS},
            "received_at": now,
            "expires_at": expires,
            "status": "pending",
            "job_id": None,
            "forced_job_id": None,
            "settled_at": None,
        }
        for r in new
    ]


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
        if new and not parked:
            done = await self.dialect.response_insert_committed(
                self.engine, response_rows(new, now, expires), responses_payload()
            )
            if done is not None:
                for listener in self.listeners:  # committed: tell this process's loops
                    listener(responses_payload())
                return done
        async with self._write() as conn:
            if new:
                rows = response_rows(new, now, expires)
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

    async def response_force_match(
        self,
        response_id: int,
        job_id: int,
        now: datetime,
        signed_types: Sequence[str] = (),
        accept_unsigned: bool = False,
    ) -> Response:
        """An operator pairs an unmatched response with an in-flight job by hand.

        A job of a type in ``signed_types`` is settled only by a response whose
        signature was verified for that type, unless ``accept_unsigned`` says the
        operator vouches for it: otherwise anyone who can post an unsigned callback
        could have a signed job completed by a careless match.
        """
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
            if job.type in signed_types and row.job_type != job.type and not accept_unsigned:
                raise Conflict(
                    f"job {job_id} is of type {job.type!r}, whose callbacks must be signed, and "
                    f"response {response_id} was not signed for it; send accept_unsigned: true "
                    "to settle it anyway",
                    field="accept_unsigned",
                )
            reopened = await conn.execute(
                update(responses)
                .where(responses.c.id == response_id, responses.c.status == row.status)
                .values(
                    status="pending",
                    forced_job_id=job_id,
                    expires_at=max(row.expires_at, now + timedelta(hours=1)),
                )
            )
            if reopened.rowcount != 1:  # settled by the loop or upkeep since read
                raise Conflict(f"response {response_id} changed meanwhile; try again", field="id")
            await self._notify(conn, {responses_payload()})  # look at the inbox
        return await self.response_get(response_id)

    async def response_delivered(
        self, job_type: str, fingerprint: str, since: datetime
    ) -> int | None:
        """The id of a response of ``job_type`` with ``fingerprint`` (a signed sender's
        ``webhook-id``) received since ``since``, whatever its correlation key, or None:
        a replay within the signature tolerance is answered from it."""
        query = select(func.min(responses.c.id)).where(
            responses.c.fingerprint == fingerprint,
            responses.c.job_type == job_type,
            responses.c.received_at >= since,
        )
        async with self._read() as conn:
            found: int | None = (await conn.execute(query)).scalar()
        return found

    async def response_counts(self, statuses: Sequence[str], limit: int) -> dict[str, int]:
        """Responses in each of ``statuses`` (``parked``: the parked messages), each
        counted up to ``limit`` (an inbox of matched responses may be large; each count
        reads at most ``limit`` entries of the status index)."""
        counts: dict[str, int] = {}
        async with self._read() as conn:
            for status in statuses:
                rows = (
                    # From the newest: the walk of its primary key, stopped at ``limit``.
                    select(parked_messages.c.id).order_by(parked_messages.c.id.desc())
                    if status == "parked"
                    else select(responses.c.id).where(responses.c.status == status)
                )
                first = rows.limit(limit).subquery()
                counted = select(func.count()).select_from(first)
                counts[status] = int((await conn.execute(counted)).scalar_one())
        return counts

    async def parked_list(
        self, after_id: int | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        query = select(parked_messages).order_by(parked_messages.c.id.desc()).limit(limit)
        if after_id is not None:
            query = query.where(parked_messages.c.id < after_id)
        async with self._read() as conn:
            return [r._asdict() for r in (await conn.execute(query)).all()]

    async def response_classify(self, now: datetime, limit: int = 1000) -> dict[str, int]:
        """Upkeep: settle up to ``limit`` inbox rows no open job will ever match.

        duplicate: a copy of a matched response (same key and fingerprint), or a
        response for a key whose finished job had its answer in its last attempt;
        late: the key's job is finished without one (timed out, cancelled, failed);
        expired: past the TTL with no job at all. Early and unknown responses stay
        pending and are not in the page, so they never hold up the rows behind them.

        One statement decides and writes: its reads share one snapshot, and the
        ``status = 'pending'`` and ``forced_job_id IS NULL`` guards are checked again on
        the newest version of each row (PostgreSQL re-checks only the outer WHERE after
        a row lock wait), so a response the loop matched or an operator matched by hand
        meanwhile is left alone. The counts are
        of the rows written.
        """
        counts = {"duplicate": 0, "late": 0, "expired": 0}
        async with self._write() as conn:
            classified = await conn.execute(_CLASSIFY, {"now": now, "limit": limit})
            for written in classified.scalars():
                counts[written] += 1
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


def _copied_job(row: FromClause) -> ScalarSelect[Any]:
    """The job of a matched response that ``row`` is a copy of (same key, same
    fingerprint), or NULL: a copy is a duplicate whatever the job does now."""
    matched = responses.alias("matched")
    return (
        select(func.max(matched.c.job_id))
        .where(
            matched.c.correlation_key == row.c.correlation_key,
            matched.c.fingerprint == row.c.fingerprint,
            matched.c.status == "matched",
        )
        .correlate_except(matched)
        .scalar_subquery()
    )


def _last_job(row: FromClause) -> ScalarSelect[Any]:
    """The newest job that holds ``row``'s key, or NULL."""
    holders = jobs.alias("holders")
    return (
        select(func.max(holders.c.id))
        .where(holders.c.correlation_key == row.c.correlation_key)
        .correlate_except(holders)  # ``row`` is the enclosing statement's, however deep
        .scalar_subquery()
    )


def _answered(job_id: ScalarSelect[Any]) -> Exists:
    """Whether the last attempt of job ``job_id`` matched a response: a response after
    that is a duplicate, otherwise late (and a job type may accept a late success).
    An earlier attempt's match does not count: that attempt failed and was retried.
    Rows matched before the attempt was recorded (NULL) count, as they used to."""
    matched, job = responses.alias("answer"), jobs.alias("finished")
    return (
        exists()
        .where(
            job.c.id == job_id,
            matched.c.job_id == job.c.id,
            matched.c.status == "matched",
            or_(matched.c.job_attempt.is_(None), matched.c.job_attempt == job.c.attempt),
        )
        .correlate_except(matched, job)
    )


def _settleable(row: FromClause, now: ColumnElement[Any]) -> ColumnElement[bool]:
    """Whether upkeep can settle pending ``row`` now: a copy of a matched response,
    or no open job holds its key and it has a finished job or is past its TTL.
    An operator's match by hand is the loop's to settle."""
    holders = jobs.alias("open_holders")
    open_job = (
        exists()
        .where(holders.c.correlation_key == row.c.correlation_key, holders.c.state.in_(OPEN_SQL))
        .correlate_except(holders)
    )
    return and_(
        row.c.forced_job_id.is_(None),
        or_(
            _copied_job(row).is_not(None),
            and_(~open_job, or_(_last_job(row).is_not(None), row.c.expires_at <= now)),
        ),
    )


def _classify_statement() -> Any:
    """``response_classify``'s statement, built once: its aliases of two wide tables
    cost about as much to build as the statement costs to run, every upkeep."""
    now = bindparam("now", type_=responses.c.received_at.type)
    page = responses.alias("page")
    chosen = (
        select(page.c.id)
        .where(page.c.status == PENDING_SQL, _settleable(page, now))
        .order_by(page.c.id)
        .limit(bindparam("limit", type_=Integer))
    )
    copied, last_job = _copied_job(responses), _last_job(responses)
    status = case(
        (copied.is_not(None), "duplicate"),
        (last_job.is_(None), "expired"),
        (_answered(last_job), "duplicate"),
        else_="late",
    )
    return (
        update(responses)
        .where(
            responses.c.id.in_(chosen),
            responses.c.status == PENDING_SQL,
            # Checked again with the status: a match by hand committed while this
            # waited for the row's lock reopens the row as pending, for the loop.
            responses.c.forced_job_id.is_(None),
        )
        .values(status=status, job_id=func.coalesce(copied, last_job), settled_at=now)
        .returning(responses.c.status)
    )


_CLASSIFY = _classify_statement()
