"""Pull workers' claims: which worker took a job's attempt, and the token that proves it.

The queue's owner claims a pull job as any other (its throttlers admit it, its
capacity is held until the job settles); the job is then offered to workers while
no claim holds its current attempt. A fetch, in any process, takes such jobs with
``FOR UPDATE SKIP LOCKED`` on PostgreSQL (SQLite serialises writers) and writes one
claim per job. A worker's report names the job and carries the token; it is valid
while the job is in flight in the attempt the claim was for. The report itself then
travels as an external system's would (the inbox, the heartbeats), under the job's
per-claim correlation key, and the owner settles it at its tick.

An outcome (complete, fail, snooze) is taken once per claim: ``pull_report`` marks the
claim ``reported`` with the outcome's fingerprint in the transaction that stores it,
so the same report sent again is accepted again without a second row, and another
outcome for the claim is refused at once (a 409), on both engines alike. Many
reports, of many jobs, are checked and stored in one transaction.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, exists, select, update

from hipq.jobs import Job
from hipq.store.inbox import response_rows
from hipq.store.records import Conflict, NewResponse, NotFound, StoreError
from hipq.store.rows import row_to_job
from hipq.store.schema import jobs, pull_claims, responses
from hipq.store.state_guards import IN_FLIGHT_SQL
from hipq.store.transactions import Transactions
from hipq.store.wakeup import pull_payload, responses_payload

# The inbox source of a worker's report: the only one that settles a pull job.
WORKER_SOURCE = "worker"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class PullReport:
    """A worker's outcome for the job it holds with ``token``; ``build`` makes the
    inbox row from the job's correlation key and type once they are read. A job of a
    type outside ``types`` (a restricted worker token's) answers as an absent one."""

    job_id: int
    token: str
    build: Callable[[str, str], NewResponse]
    types: Collection[str] | None = None


def _held_row_problem(row: Any, job: Job, token: str) -> StoreError | None:
    """Why ``token`` does not hold ``row``'s job (``job``) in flight now, or None."""
    if not hmac.compare_digest(row.token_digest or "", token_digest(token)):
        return Conflict(
            f"job {row.id}: this token does not hold the job (another attempt's, or never fetched)",
            field="token",
        )
    state = job.state.value
    held = row.held_attempt == row.attempt and row.held_claim == row.claimed_at
    if not held or state not in ("running", "awaiting"):
        return Conflict(
            f"job {row.id} is {state} in attempt {row.attempt}: the claim this "
            "token was for is over (timed out, settled or snoozed: its report is ignored)",
            field="token",
        )
    if row.correlation_key is None:  # claimed by a hipq that built no pull key
        return Conflict(f"job {row.id} is not a pull job", field="id")
    return None


def _reported_twice(job_id: int) -> Conflict:
    return Conflict(
        f"job {job_id}: this claim's outcome was reported already (a claim takes one "
        "outcome; this one is ignored)",
        field="token",
    )


def _held_select() -> Any:
    return select(
        jobs,
        pull_claims.c.attempt.label("held_attempt"),
        pull_claims.c.claimed_at.label("held_claim"),
        pull_claims.c.token_digest,
        pull_claims.c.reported,
    ).outerjoin(pull_claims, pull_claims.c.job_id == jobs.c.id)


class PullClaimTable(Transactions):
    async def pull_fetch(
        self,
        types: Sequence[str],
        limit: int,
        worker: str,
        now: datetime,
        max_weight: int | None = None,
    ) -> list[tuple[Job, str]]:
        """Take up to ``limit`` claimed jobs of ``types`` that no worker holds yet, in
        the order they were claimed, whose weights add up to at most ``max_weight``
        (a heavier one is left for another worker); each with its new attempt token."""
        taken = (
            exists()
            .where(
                pull_claims.c.job_id == jobs.c.id,
                pull_claims.c.attempt == jobs.c.attempt,
                pull_claims.c.claimed_at == jobs.c.claimed_at,
            )
            .correlate(jobs)
        )
        offered = self.dialect.skip_locked(
            select(jobs)
            .where(
                jobs.c.type.in_(list(types)),
                jobs.c.state.in_(IN_FLIGHT_SQL),
                jobs.c.deadline > now,  # one past it is the owner's to time out
                ~taken,
            )
            .order_by(jobs.c.claimed_at, jobs.c.id)
            .limit(limit)
        )
        async with self._write() as conn:
            offers = [row_to_job(row) for row in (await conn.execute(offered)).all()]
            if max_weight is not None:
                offers = _within(offers, max_weight)
            if not offers:
                return []
            tokens = {job.id: secrets.token_urlsafe(24) for job in offers}
            rows = [
                {
                    "job_id": job.id,
                    "attempt": job.attempt,
                    "claimed_at": job.claimed_at,
                    "token_digest": token_digest(tokens[job.id]),
                    "worker": worker,
                    "fetched_at": now,
                    "reported": None,
                }
                for job in offers
            ]
            # One statement, so that the rows locked above are held for two round trips
            # only (the owner's tick waits for them to mark its jobs awaiting). A fetch
            # whose read raced another's commit (PostgreSQL does not re-check a row that
            # was not itself changed) finds the claim taken here. Sent with the rows as
            # parameters (SQLAlchemy's insertmanyvalues makes it one statement): a
            # statement with the rows in its VALUES was compiled again for every fetch.
            insert = self.dialect.insert(pull_claims)
            new = insert.excluded
            claim = insert.on_conflict_do_update(
                index_elements=[pull_claims.c.job_id],
                set_={c.name: new[c.name] for c in pull_claims.c if c.name != "job_id"},
                where=(pull_claims.c.attempt != new.attempt)
                | (pull_claims.c.claimed_at != new.claimed_at),
            ).returning(pull_claims.c.job_id)
            claimed = {row.job_id for row in (await conn.execute(claim, rows)).all()}
        return [(job, tokens[job.id]) for job in offers if job.id in claimed]

    async def pull_claimed_job(self, job_id: int, token: str) -> Job:
        """The job a worker reports on, while ``token`` holds its claim in flight and
        no outcome was reported for it; ``NotFound`` for no such job, ``Conflict`` for a
        stale or foreign token."""
        async with self._read() as conn:
            row = (await conn.execute(_held_select().where(jobs.c.id == job_id))).first()
        if row is None:
            raise NotFound(f"job {job_id} does not exist", field="id")
        job = row_to_job(row)
        if problem := _held_row_problem(row, job, token):
            raise problem
        if row.reported is not None:
            raise _reported_twice(job_id)
        return job

    async def pull_report(
        self,
        reports: Sequence[PullReport],
        now: datetime,
        ttl: float,
    ) -> tuple[list[Job | StoreError], list[NewResponse]]:
        """Take workers' outcomes, in one transaction: for each report, its job (the
        report is stored in the inbox, or was already, the same) or why not:
        ``NotFound`` (no such job, or one of a type outside its ``types``), ``Conflict``
        (a stale or foreign token, or another outcome reported for the claim); and
        the responses newly stored."""
        ids = list({r.job_id for r in reports})
        out: list[Job | StoreError] = []
        async with self._write() as conn:
            read = _held_select().where(jobs.c.id.in_(ids))
            rows = {row.id: row for row in (await conn.execute(read)).all()}
            # job id -> (its index in ``out``, the claim's token digest, the new row)
            fresh: dict[int, tuple[int, str, NewResponse]] = {}
            for report in reports:
                row = rows.get(report.job_id)
                if row is None or (report.types is not None and row.type not in report.types):
                    out.append(NotFound(f"job {report.job_id} does not exist", field="id"))
                    continue
                job = row_to_job(row)
                if problem := _held_row_problem(row, job, report.token):
                    out.append(problem)
                    continue
                response = report.build(row.correlation_key, row.type)
                taken = fresh.get(row.id)
                said = row.reported if taken is None else taken[2].fingerprint
                if said is not None:  # a copy of the one taken is taken again
                    out.append(job if said == response.fingerprint else _reported_twice(job.id))
                    continue
                fresh[row.id] = (len(out), row.token_digest, response)
                out.append(job)
            if not fresh:
                return out, []
            by_id = pull_claims.c.job_id
            marked = (
                update(pull_claims)
                .where(
                    by_id.in_(list(fresh)),
                    pull_claims.c.reported.is_(None),
                    pull_claims.c.token_digest
                    == case({i: d for i, (_n, d, _r) in fresh.items()}, value=by_id),
                )
                .values(
                    reported=case(
                        {i: r.fingerprint for i, (_n, _d, r) in fresh.items()}, value=by_id
                    )
                )
                .returning(by_id)
            )
            won = {row.job_id for row in (await conn.execute(marked)).all()}
            for job_id, (index, _digest, _response) in fresh.items():
                if job_id not in won:  # another report took the claim meanwhile
                    out[index] = _reported_twice(job_id)
            stored = [fresh[i][2] for i in fresh if i in won]
            if stored:
                expires = now + timedelta(seconds=ttl)
                await conn.execute(responses.insert(), response_rows(stored, now, expires))
                await self._notify(conn, {responses_payload()})
        return out, stored

    async def pull_announce(self, types: Sequence[str]) -> None:
        """Tell waiting fetches in every process that jobs of ``types`` were claimed:
        this process's at once, the others by NOTIFY (no write transaction: on SQLite
        it would queue behind the ticks for nothing)."""
        payloads = {pull_payload(t) for t in types}
        for payload in payloads:
            for listener in self.listeners:
                listener(payload)
        async with self._read() as conn:
            await self.dialect.notify(conn, payloads)


def _within(offers: list[Job], max_weight: int) -> list[Job]:
    """The offers, in order, whose weights fit in ``max_weight`` together."""
    out, left = [], max_weight
    for job in offers:
        if job.weight <= left:
            out.append(job)
            left -= job.weight
    return out
