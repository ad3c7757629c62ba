"""Pull workers' claims: which worker took a job's attempt, and the token that proves it.

The queue's owner claims a pull job as any other (its throttlers admit it, its
capacity is held until the job settles); the job is then offered to workers while
no claim holds its current attempt. A fetch, in any process, takes such jobs with
``FOR UPDATE SKIP LOCKED`` on PostgreSQL (SQLite serialises writers) and writes one
claim per job. A worker's report names the job and carries the token; it is valid
while the job is in flight in the attempt the claim was for. The report itself then
travels as an external system's would (the inbox, the heartbeats), under the job's
per-attempt correlation key, and the owner settles it at its tick.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import exists, select

from hipq.jobs import Job
from hipq.store.records import Conflict, NotFound
from hipq.store.rows import row_to_job
from hipq.store.schema import jobs, pull_claims
from hipq.store.state_guards import IN_FLIGHT_SQL
from hipq.store.transactions import Transactions
from hipq.store.wakeup import pull_payload


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class PullClaimTable(Transactions):
    async def pull_fetch(
        self, types: Sequence[str], limit: int, worker: str, now: datetime
    ) -> list[tuple[Job, str]]:
        """Take up to ``limit`` claimed jobs of ``types`` that no worker holds yet, in
        the order they were claimed; each with its new attempt token."""
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
                }
                for job in offers
            ]
            # One statement, so that the rows locked above are held for two round trips
            # only (the owner's tick waits for them to mark its jobs awaiting). A fetch
            # whose read raced another's commit (PostgreSQL does not re-check a row that
            # was not itself changed) finds the claim taken here.
            insert = self.dialect.insert(pull_claims).values(rows)
            new = insert.excluded
            claim = insert.on_conflict_do_update(
                index_elements=[pull_claims.c.job_id],
                set_={c.name: new[c.name] for c in pull_claims.c if c.name != "job_id"},
                where=(pull_claims.c.attempt != new.attempt)
                | (pull_claims.c.claimed_at != new.claimed_at),
            ).returning(pull_claims.c.job_id)
            claimed = {row.job_id for row in (await conn.execute(claim)).all()}
        return [(job, tokens[job.id]) for job in offers if job.id in claimed]

    async def pull_claimed_job(self, job_id: int, token: str) -> Job:
        """The job a worker reports on, while ``token`` holds its claim in flight;
        ``NotFound`` for no such job, ``Conflict`` for a stale or foreign token."""
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(
                        jobs,
                        pull_claims.c.attempt.label("held_attempt"),
                        pull_claims.c.claimed_at.label("held_claim"),
                        pull_claims.c.token_digest,
                    )
                    .outerjoin(pull_claims, pull_claims.c.job_id == jobs.c.id)
                    .where(jobs.c.id == job_id)
                )
            ).first()
        if row is None:
            raise NotFound(f"job {job_id} does not exist", field="id")
        job = row_to_job(row)
        digest = row.token_digest or ""
        if not hmac.compare_digest(digest, token_digest(token)):
            raise Conflict(
                f"job {job_id}: this token does not hold the job (another attempt's, "
                "or never fetched)",
                field="token",
            )
        held = row.held_attempt == job.attempt and row.held_claim == job.claimed_at
        if not held or job.state.value not in ("running", "awaiting"):
            raise Conflict(
                f"job {job_id} is {job.state.value} in attempt {job.attempt}: the claim this "
                "token was for is over (timed out, settled or snoozed: its report is ignored)",
                field="token",
            )
        return job

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
