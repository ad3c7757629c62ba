"""``hipq.client.Client``: the REST API from ordinary (blocking) code.

Generated from aio.py by scripts/unasync.py: edit aio.py, then run
``python scripts/unasync.py`` (tests/client/test_unasync.py fails while this file is stale).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar, Unpack

import httpx
from pydantic import BaseModel, ConfigDict, TypeAdapter

from hipq.client import calls
from hipq.client.calls import Backoff, Call, Readiness
from hipq.client.errors import ApiError, WaitTimeout
from hipq.client.models import (
    AddedBatch,
    Batch,
    BatchPage,
    BulkAction,
    BulkCount,
    BulkFilter,
    BulkOperation,
    BulkParams,
    FetchedJob,
    Fires,
    FireTimes,
    Job,
    JobChanges,
    JobFields,
    JobPage,
    JobRef,
    NewJob,
    Queue,
    ReportResult,
    Reschedule,
    Response,
    ResponsePage,
    Schedule,
    ScheduleChanges,
    ScheduleFields,
    ScheduleRun,
    WorkerBeat,
    WorkerReport,
)

M = TypeVar("M", bound=BaseModel)
# Built at their first use, as the models are (``defer_build``): a call validates one
# or two kinds of answer, and building all of them costs every CLI call its CPU.
_LAZY = ConfigDict(defer_build=True)
_REFS = TypeAdapter(list[JobRef], config=_LAZY)
_QUEUES = TypeAdapter(list[Queue], config=_LAZY)
_BULK = TypeAdapter(list[BulkOperation], config=_LAZY)
_SCHEDULES = TypeAdapter(list[Schedule], config=_LAZY)
_FETCHED = TypeAdapter(list[FetchedJob], config=_LAZY)
_REPORT_RESULTS = TypeAdapter(list[ReportResult], config=_LAZY)


class Client:
    """hipq's API for blocking code, at ``url`` (default: ``HIPQ_URL``, else
    http://127.0.0.1:8000).

    ``token``: the bearer token (default: ``HIPQ_TOKEN``). ``headers``: sent with every
    request. ``timeout``: seconds for one request. ``backoff``: how connection errors
    and 503s are retried, and for how long. A 4xx raises an :class:`~hipq.client.ApiError`
    naming the field and the problem.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        backoff: Backoff | None = None,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = calls.url_from(url)
        self.backoff = backoff or Backoff()
        secret = calls.token_from(token)
        auth = {"Authorization": f"Bearer {secret}"} if secret else {}
        self._http = httpx.Client(
            base_url=self.url,
            timeout=timeout,
            headers={**(headers or {}), **auth},
            transport=transport,
        )
        self._long_poll: bool | None = None  # the server offers ?wait= (asked once)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- sending ------------------------------------------------------------------------

    def send(self, call: Call) -> httpx.Response:
        """``call``'s answer, sent again after connection errors and 503s while the
        backoff's budget lasts; an error answer raises :class:`ApiError`."""
        started = time.monotonic()
        attempt = 0
        while True:
            answer: httpx.Response | httpx.TransportError
            try:
                answer = self._http.request(call.method, call.path, **call.request_kwargs())
            except httpx.TransportError as exc:
                answer = exc
            delay = calls.retry_delay(call, answer, attempt, self.backoff)
            if delay is None or time.monotonic() - started + delay > self.backoff.budget:
                return calls.answer_or_raise(self.url, answer)
            time.sleep(delay)
            attempt += 1

    def _model(self, call: Call, model: type[M]) -> M:
        return model.model_validate_json(self.send(call).content)

    # -- jobs ---------------------------------------------------------------------------

    def add_job(
        self,
        type: str,
        payload: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        **fields: Unpack[JobFields],
    ) -> Job:
        """Create a job. Sent again after a lost answer, it is created once: the call
        carries an Idempotency-Key (made here unless given; give your own to make a
        retry of a whole program run safe too, within the server's idempotency_ttl)."""
        job = {"type": type, "payload": payload, **fields}
        return self._model(calls.add_job(job, idempotency_key), Job)

    def add_jobs(
        self, jobs: Iterable[NewJob], *, idempotency_key: str | None = None
    ) -> list[JobRef]:
        """Create many jobs in one transaction (all or none), each as ``add_job``'s
        fields; at most the server's ``server.max_batch_jobs`` in one call."""
        call = calls.add_jobs([dict(j) for j in jobs], idempotency_key)
        return _REFS.validate_python(self.send(call).json()["jobs"])

    def add_batch(
        self,
        jobs: Iterable[NewJob],
        *,
        on_complete: Mapping[str, Any] | None = None,
        notify: Iterable[str] | None = None,
        idempotency_key: str | None = None,
    ) -> AddedBatch:
        """Create many jobs as a batch (all or none), sealed: its counts at
        :meth:`get_batch`. ``on_complete`` (``type``, ``payload``, ``queue``): a job that
        runs once every job finished, with the counts in its payload under ``batch``;
        ``notify``: the targets told once the batch finishes."""
        batch = {"on_complete": on_complete, "notify": None if notify is None else list(notify)}
        call = calls.add_jobs([dict(j) for j in jobs], idempotency_key, batch)
        return self._model(call, AddedBatch)

    def create_batch(
        self,
        *,
        on_complete: Mapping[str, Any] | None = None,
        notify: Iterable[str] | None = None,
    ) -> Batch:
        """Make an open batch: jobs join it (``batch_id=`` of :meth:`add_job` and
        :meth:`add_jobs`) until :meth:`seal_batch`; it finishes once sealed and none of
        its jobs is pending."""
        batch = {"on_complete": on_complete, "notify": None if notify is None else list(notify)}
        return self._model(calls.create_batch(batch), Batch)

    def seal_batch(self, batch_id: int) -> Batch:
        """Seal a batch: it finishes once none of its jobs is pending (at once if none is)."""
        return self._model(calls.seal_batch(batch_id), Batch)

    def get_batch(self, batch_id: int) -> Batch:
        """A batch's counts: pending, completed, failed, cancelled."""
        return self._model(calls.get_batch(batch_id), Batch)

    def list_batches(self, *, limit: int = 100, cursor: str | None = None) -> BatchPage:
        """One page of batches, newest first; ``next_cursor`` continues it."""
        return self._model(calls.list_batches(limit, cursor), BatchPage)

    def list_batch_jobs(
        self, batch_id: int, *, limit: int = 100, cursor: str | None = None
    ) -> JobPage:
        """One page of a batch's jobs, newest first; ``next_cursor`` continues it."""
        return self._model(calls.list_batch_jobs(batch_id, limit, cursor), JobPage)

    def get_job(self, job_id: int) -> Job:
        """A job with its attempts."""
        return self._model(calls.get_job(job_id), Job)

    def list_jobs(
        self,
        *,
        queue: str | None = None,
        states: Iterable[str] | None = None,
        type: str | None = None,
        labels: Mapping[str, str] | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> JobPage:
        """One page of jobs, newest first; ``next_cursor`` continues it."""
        call = calls.list_jobs(
            queue=queue, states=states, type=type, labels=labels, limit=limit, cursor=cursor
        )
        return self._model(call, JobPage)

    def iter_jobs(
        self,
        *,
        queue: str | None = None,
        states: Iterable[str] | None = None,
        type: str | None = None,
        labels: Mapping[str, str] | None = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Every job the filters match, newest first, a page fetched as it is needed."""
        states = list(states or ())
        cursor: str | None = None
        while True:
            page = self.list_jobs(
                queue=queue,
                states=states,
                type=type,
                labels=labels,
                limit=page_size,
                cursor=cursor,
            )
            yield from page.jobs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def cancel_job(self, job_id: int, reason: str | None = None) -> Job:
        """Cancel a job; a running one is cancelled by its queue's loop (then
        ``cancel_requested`` is true and the state follows at its next tick)."""
        return self._model(calls.cancel_job(job_id, reason), Job)

    def complete_job(self, job_id: int, result: Any = None) -> Job:
        """Complete an open job with ``result`` (one in flight: by its queue's loop)."""
        return self._model(calls.complete_job(job_id, result), Job)

    def fail_job(self, job_id: int, reason: str) -> Job:
        """Fail an open job for good (no retry); ``reason`` becomes its last_error."""
        return self._model(calls.fail_job(job_id, reason), Job)

    def reschedule_job(self, job_id: int, **fields: Unpack[Reschedule]) -> Job:
        """Run a scheduled, failed or cancelled job later (or put a running one back):
        ``run_at`` or ``run_in``, ``priority``, ``reset_attempts``, ``max_attempts``."""
        return self._model(calls.reschedule_job(job_id, fields), Job)

    def delete_job(self, job_id: int) -> Job:
        """Delete a finished job and its attempts; returns it as it was."""
        return self._model(calls.delete_job(job_id), Job)

    def get_job_by_key(self, job_key: str) -> Job:
        """The open job that holds ``job_key``."""
        return self._model(calls.get_job_by_key(job_key), Job)

    def cancel_job_by_key(self, job_key: str) -> Job:
        """Cancel the open job that holds ``job_key``."""
        return self._model(calls.cancel_job_by_key(job_key), Job)

    def bulk(
        self, action: BulkAction, filter: BulkFilter, **params: Unpack[BulkParams]
    ) -> BulkOperation:
        """Start ``action`` on every job ``filter`` matches; it runs on in bounded steps
        (follow it with :meth:`get_bulk`)."""
        return self._model(calls.start_bulk(action, filter, False, params), BulkOperation)

    def bulk_dry_run(
        self, action: BulkAction, filter: BulkFilter, **params: Unpack[BulkParams]
    ) -> BulkCount:
        """How many jobs :meth:`bulk` would touch now; changes nothing."""
        return self._model(calls.start_bulk(action, filter, True, params), BulkCount)

    def get_bulk(self, bulk_id: int) -> BulkOperation:
        """A bulk operation and its progress."""
        return self._model(calls.get_bulk(bulk_id), BulkOperation)

    def list_bulk(self) -> list[BulkOperation]:
        """The latest bulk operations, newest first."""
        return _BULK.validate_python(self.send(calls.list_bulk()).json()["operations"])

    def retry_job(self, job_id: int, run_at: datetime | str | None = None) -> Job:
        """Run a failed or cancelled job again (a new attempt), now or at ``run_at``."""
        return self._model(calls.retry_job(job_id, run_at), Job)

    def change_job(self, job_id: int, **changes: Unpack[JobChanges]) -> Job:
        """Change a scheduled job (run_at, priority, payload, weight, labels, ...)."""
        return self._model(calls.change_job(job_id, changes), Job)

    # ``timeout`` (not a timeout around the call) ends in WaitTimeout holding the job.
    def wait(self, job_id: int, timeout: float = 60.0) -> Job:
        """The job once it is completed, failed or cancelled; :class:`WaitTimeout`
        (a TimeoutError, holding the job as last seen) after ``timeout`` seconds.

        A server that offers ``GET /v1/jobs/{id}?wait=`` holds each call until the job
        ends (at most 30 s a call); an older one is polled with a growing pause."""
        if self._long_poll is None:
            try:
                self._long_poll = calls.offers_wait(self.send(calls.openapi()).json())
            except ApiError:
                self._long_poll = False  # no schema to read (e.g. a gateway hides it)
        read = self._http.timeout.read or 30.0
        waiter = calls.Waiter(timeout, time.monotonic(), self._long_poll, read)
        while True:
            sent = time.monotonic()
            job = self._model(waiter.next_call(job_id, sent), Job)
            if job.terminal:
                return job
            pause = waiter.pause(time.monotonic(), sent)
            if pause is None:
                raise WaitTimeout(job, timeout)
            time.sleep(pause)

    # -- queues -------------------------------------------------------------------------

    def list_queues(self) -> list[Queue]:
        """Every queue with its live counts."""
        return _QUEUES.validate_python(self.send(calls.list_queues()).json()["queues"])

    def get_queue(self, name: str) -> Queue:
        return self._model(calls.get_queue(name), Queue)

    def pause_queue(self, name: str) -> Queue:
        """Stop admitting the queue's jobs (jobs in flight still finish)."""
        return self._model(calls.pause_queue(name, True), Queue)

    def resume_queue(self, name: str) -> Queue:
        return self._model(calls.pause_queue(name, False), Queue)

    def set_forbidden_flags(self, name: str, flags: Iterable[str]) -> Queue:
        """Replace the queue's forbidden flags (jobs carrying one of them wait)."""
        return self._model(calls.set_forbidden_flags(name, flags), Queue)

    def change_limits(self, name: str, changes: Mapping[str, Any]) -> Queue:
        """Change the queue's limits at run time, e.g. ``{"concurrency": 50}`` or
        ``{"throttlers": {"0": {"limit": 5}}}``; its owner applies them at its next tick."""
        return self._model(calls.change_limits(name, changes), Queue)

    def reset_limits(self, name: str) -> Queue:
        """Back to the config's limits."""
        return self._model(calls.reset_limits(name), Queue)

    # -- schedules ----------------------------------------------------------------------

    def list_schedules(self) -> list[Schedule]:
        body = self.send(calls.list_schedules()).json()
        return _SCHEDULES.validate_python(body["schedules"])

    def get_schedule(self, name: str) -> Schedule:
        return self._model(calls.get_schedule(name), Schedule)

    def create_schedule(
        self, name: str, cron: str, job: Mapping[str, Any], **fields: Unpack[ScheduleFields]
    ) -> Schedule:
        """A recurring job: ``job`` (the fields of add_job, with ``type``) at each fire
        time of ``cron`` (five fields) in ``timezone``."""
        body = {"name": name, "cron": cron, "job": job, **fields}
        return self._model(calls.create_schedule(body), Schedule)

    def change_schedule(self, name: str, **changes: Unpack[ScheduleChanges]) -> Schedule:
        return self._model(calls.change_schedule(name, changes), Schedule)

    def delete_schedule(self, name: str) -> None:
        """Delete a schedule made through the API (its jobs stay)."""
        self.send(calls.delete_schedule(name))  # 204, no body

    def pause_schedule(self, name: str) -> Schedule:
        return self._model(calls.pause_schedule(name, True), Schedule)

    def resume_schedule(self, name: str) -> Schedule:
        return self._model(calls.pause_schedule(name, False), Schedule)

    def run_schedule(self, name: str) -> ScheduleRun:
        """Make one job of the schedule now."""
        return self._model(calls.run_schedule(name), ScheduleRun)

    def next_fire_times(self, name: str, count: int = 10) -> FireTimes:
        return self._model(calls.next_fire_times(name, count), FireTimes)

    def schedule_fires(self, name: str, limit: int = 50) -> Fires:
        """The schedule's latest fire times and what became of each."""
        return self._model(calls.schedule_fires(name, limit), Fires)

    # -- responses ----------------------------------------------------------------------

    def list_responses(
        self,
        *,
        statuses: Iterable[str] | None = None,
        matched: bool | None = None,
        key: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> ResponsePage:
        """One page of the responses inbox, newest first."""
        call = calls.list_responses(
            statuses=statuses, matched=matched, key=key, limit=limit, cursor=cursor
        )
        return self._model(call, ResponsePage)

    def iter_responses(
        self,
        *,
        statuses: Iterable[str] | None = None,
        matched: bool | None = None,
        key: str | None = None,
        page_size: int = 100,
    ) -> Iterator[Response]:
        """Every response the filters match, newest first."""
        statuses = list(statuses or ())
        cursor: str | None = None
        while True:
            page = self.list_responses(
                statuses=statuses, matched=matched, key=key, limit=page_size, cursor=cursor
            )
            yield from page.responses
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def get_response(self, response_id: int) -> Response:
        return self._model(calls.get_response(response_id), Response)

    def match_response(
        self, response_id: int, job_id: int, *, accept_unsigned: bool = False
    ) -> Response:
        """Settle a running or awaiting job with this response (at its loop's next tick)."""
        call = calls.match_response(response_id, job_id, accept_unsigned)
        return self._model(call, Response)

    # -- pull workers -------------------------------------------------------------------

    def fetch_jobs(
        self,
        types: Iterable[str],
        count: int = 1,
        *,
        wait: float = 0,
        worker: str | None = None,
        weight: int | None = None,
    ) -> list[FetchedJob]:
        """Take up to ``count`` claimed jobs of these pull types, waiting up to ``wait``
        seconds (at most 60) for one when none can be taken now; ``worker`` names the
        taker in the job's record (default: the token's name); with ``weight``, the jobs
        taken weigh at most that together."""
        call = calls.fetch_jobs(types, count, wait, worker, weight)
        return _FETCHED.validate_python(self.send(call).json()["jobs"])

    def report_complete(self, job_id: int, token: str, result: Any = None) -> WorkerReport:
        """A fetched job succeeded with ``result``. A stale ``token`` (the job timed out,
        was settled or fetched again) raises :class:`~hipq.client.Conflict`."""
        call = calls.worker_report(job_id, "complete", token, {"result": result})
        return self._model(call, WorkerReport)

    def report_failure(
        self,
        job_id: int,
        token: str,
        error: str,
        *,
        retryable: bool = True,
        traceback: str | None = None,
    ) -> WorkerReport:
        """A fetched job's attempt failed; its retry strategy decides unless not
        ``retryable``."""
        fields = {"error": error, "retryable": retryable, "traceback": traceback}
        return self._model(calls.worker_report(job_id, "fail", token, fields), WorkerReport)

    def report_snooze(
        self, job_id: int, token: str, seconds: float, reason: str | None = None
    ) -> WorkerReport:
        """Run the fetched job again after ``seconds``, without spending an attempt."""
        fields = {"seconds": seconds, "reason": reason}
        return self._model(calls.worker_report(job_id, "snooze", token, fields), WorkerReport)

    def report_outcomes(self, reports: Iterable[Mapping[str, Any]]) -> list[ReportResult]:
        """Outcomes of many fetched jobs in one request, each a mapping with ``id``,
        ``token`` and ``outcome``: ``"completed"`` (``result``), ``"failed"``
        (``error``, ``retryable``, ``traceback``) or ``"snoozed"`` (``seconds``,
        ``reason``). One result per report, in order; a report refused alone does not
        raise (see :class:`~hipq.client.ReportResult`)."""
        answer = self.send(calls.worker_reports(reports))
        return _REPORT_RESULTS.validate_python(answer.json()["results"])

    def report_heartbeat(
        self,
        job_id: int,
        token: str,
        progress: Any = None,
        *,
        extend_by: float | None = None,
    ) -> WorkerBeat:
        """Still working on the fetched job: its deadline moves (by ``extend_by``
        seconds, default the type's heartbeat_timeout, else the job's timeout)."""
        fields: dict[str, Any] = {"extend_by": extend_by}
        if progress is not None:
            fields["progress"] = progress
        return self._model(calls.worker_report(job_id, "heartbeat", token, fields), WorkerBeat)

    def report_checkpoint(
        self,
        job_id: int,
        token: str,
        payload: Mapping[str, Any],
        *,
        extend_by: float | None = None,
    ) -> WorkerBeat:
        """Keep ``payload`` as the fetched job's payload: a retry starts from it."""
        fields = {"payload": dict(payload), "extend_by": extend_by}
        call = calls.worker_report(job_id, "checkpoint", token, fields)
        return self._model(call, WorkerBeat)

    # -- readiness ----------------------------------------------------------------------

    def ready(self) -> Readiness:
        """Whether hipq can accept a job now, and /readyz's report (``problems`` says
        what is not ready). Not retried: a refused connection is an answer here."""
        try:
            answer: httpx.Response | httpx.TransportError = self._http.get("/readyz")
        except httpx.TransportError as exc:
            answer = exc
        return calls.readiness(answer)

    def wait_ready(self, timeout: float = 60.0) -> dict[str, Any]:
        """/readyz's report once it answers 200; :class:`TimeoutError` after ``timeout``."""
        waiter = calls.ReadyWaiter(timeout, time.monotonic())
        while True:
            ready, _status, report = self.ready()
            if ready:
                return report
            pause = waiter.pause(time.monotonic())
            if pause is None:
                raise TimeoutError(waiter.give_up(self.url, report))
            time.sleep(pause)
