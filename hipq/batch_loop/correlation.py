"""Correlation for one queue: keys built at claim, and inbox responses matched to the
queue's in-flight jobs.

Built from the one job-type registry: which types' keys need the job's id or attempt
(built when the job is claimed), which accept a late success, and which settle only
on a signed callback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from hipq.ingest.response_intake import callback_key_problem
from hipq.job_types import PULL_KEY_PREFIX, JobTypes, new_pull_key
from hipq.jobs import Job
from hipq.outcomes import Failed, Outcome, response_outcome
from hipq.pull.reports import worker_outcome
from hipq.retry import AttemptError
from hipq.store import QueueBatch
from hipq.templates import TemplateError, job_context

# An event to emit once the tick's transaction has committed: (name, fields).
Event = tuple[str, dict[str, Any]]
# job id -> (response id, outcome)
Matches = dict[int, tuple[int, Outcome]]


class Correlation:
    def __init__(self, queue: str, job_types: JobTypes, clock: Callable[[], datetime]) -> None:
        self.queue, self.clock = queue, clock
        # Jobs may be enqueued to another queue than their type's: any queue matches
        # responses if any job type is external.
        self.active = job_types.any_external
        # Job types whose correlation key needs the job's id or attempt: built at claim.
        self.key_templates = job_types.keys_at_dispatch()
        # Job types that accept a late successful response (late_responses: accept).
        self.late_types = job_types.accepting_late()
        # Job types whose callbacks must be signed: only verified responses settle them.
        self.signed_types = job_types.signed_types()
        # Pull types: a new random key per claim, and only their workers' reports
        # settle them (a callback under a key read from the job's view does not).
        self.pull_types = frozenset(job_types.pulled())

    async def match(
        self, batch: QueueBatch, in_flight: Mapping[int, Job], committed: list[Event]
    ) -> Matches:
        """job id -> (response id, outcome) for pending responses of in-flight jobs;
        late successes and duplicates are settled on the way."""
        if not self.active:
            return {}
        if self.late_types:
            accepted = await batch.response_accept_late(
                self.late_types, self.clock(), signed_types=self.signed_types
            )
            for job_id in accepted:
                fields = {"job_id": job_id, "state": "completed", "attempt": None, "error": None}
                committed.append(("job_settled", {"queue": self.queue, **fields}))
            if accepted:
                committed.append(
                    ("responses_settled", {"status": "late_accepted", "count": len(accepted)})
                )
        matches, duplicates = await batch.response_match(self.signed_types, self.pull_types)
        marked = await batch.response_mark([], duplicates, self.clock())
        if marked:
            committed.append(("responses_settled", {"status": "duplicate", "count": marked}))
        out: Matches = {}
        for m in matches:
            if m.job_id in in_flight:
                r = m.response
                # A pull worker's report says more than a success or failure.
                outcome = worker_outcome(r) or response_outcome(r.succeeded, r.reason, r.body)
                out[m.job_id] = (r.id, outcome)
        return out

    async def dispatch_keys(
        self, batch: QueueBatch, claimed: list[Job], fail: Callable[[Job, Outcome], None]
    ) -> list[Job]:
        """Build correlation keys that depend on the job's id or attempt; a job whose
        key cannot be built, cannot be carried by its callback URL or is taken is
        reported to ``fail`` (and is not sent)."""
        keys = self.keys_of(claimed, fail)
        if not keys:
            return claimed
        # A key another open job holds would break the unique index and, with it, every
        # tick of the queue: such a job fails instead (its key cannot identify it). A
        # pull key is random and no caller may give one: nothing to look up.
        rendered = {i: k for i, k in keys.items() if not k.startswith(PULL_KEY_PREFIX)}
        for job_id, reason in (await batch.job_keys_in_use(rendered)).items():
            del keys[job_id]
            job = next(j for j in claimed if j.id == job_id)
            fail(job, Failed(AttemptError(reason, retryable=False)))
        await batch.job_set_correlation_keys(keys)
        return [j._replace(correlation_key=keys.get(j.id, j.correlation_key)) for j in claimed]

    def keys_of(self, claimed: list[Job], fail: Callable[[Job, Outcome], None]) -> dict[int, str]:
        """The keys to build for ``claimed`` (job id -> key; none unless a type builds
        its key at claim, ``key_templates``); a job whose key cannot be built or
        carried by its callback URL is reported to ``fail``."""
        keys: dict[int, str] = {}
        for job in claimed:
            if job.type in self.pull_types:
                keys[job.id] = new_pull_key()
                continue
            template = self.key_templates.get(job.type)
            if template is None:
                # Given or built at intake, where it was checked; not so by PostgreSQL's
                # hipq_add_jobs function, nor for a job stored by an older hipq.
                key = job.correlation_key
                if key is not None and (problem := callback_key_problem(key)):
                    error = AttemptError(f"correlation key {key!r}: {problem}", retryable=False)
                    fail(job, Failed(error))
            else:
                try:
                    key = template.render(job_context(job))
                except TemplateError as exc:
                    fail(job, Failed(AttemptError(f"correlation key: {exc}", retryable=False)))
                    continue
                # A key its callback URL cannot carry would only time out: fail it now.
                if problem := callback_key_problem(key):
                    error = AttemptError(f"correlation key {key!r}: {problem}", retryable=False)
                    fail(job, Failed(error))
                    continue
                keys[job.id] = key
        return keys


def matched_event(
    queue: str, used: list[tuple[int, int]], in_flight: Mapping[int, Job], now: datetime
) -> Event:
    """Responses that settle their jobs this tick, and how long each job waited
    for its response since it was claimed (the external system's turnaround)."""
    waits = []
    for _response_id, job_id in used:
        job = in_flight.get(job_id)
        if job is not None and job.claimed_at is not None:
            waits.append(max(0.0, (now - job.claimed_at).total_seconds()))
    fields = {"status": "matched", "count": len(used), "queue": queue, "waits": waits}
    return ("responses_settled", fields)
