"""Callback-or-poll: when a callback is overdue, hipq asks the external system.

A job type may declare a ``status_request`` (an HTTP request template, as the http
transport's). Once an awaiting job has had no response for ``after`` (a share) of
its timeout, this activity sends that request; a final answer is stored in the
responses inbox as the job's response (source ``status_request``), and the queue's
loop settles the job from it exactly as from a callback (the job type's outcome
rule; duplicates and late callbacks are handled there). A "still working" answer
(``working_statuses``, or ``working`` values of the outcome field) leaves the job
waiting, and with ``every`` the request is sent again that much later. Errors (no
answer, another status) are logged and counted; the job's deadline still holds.

It polls only the jobs of queues this process owns, from the loop's in-flight view
(read, never written: the loop stays the only writer of its jobs), so several
processes do not ask twice. Which jobs were asked when is kept in memory: a new
owner asks again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx
import orjson

from hipq.activity import Loop
from hipq.batch_loop.loop import QueueLoop
from hipq.config import StatusRequest
from hipq.events import Events
from hipq.ingest.response_intake import new_response
from hipq.ingest.response_writer import ResponseWriter
from hipq.job_types import JobTypeInfo, JobTypes
from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.outcome_rules import OutcomeRule, decide, parse_body
from hipq.process.wiring import ServiceError
from hipq.templates import job_context
from hipq.transports.http_pool import PooledTransport
from hipq.transports.rendering import (
    BodyTemplate,
    RenderError,
    TextTemplate,
    compile_body,
    compile_text,
    compile_url,
)

log = logging.getLogger("hipq.process.status_polls")

SOURCE = "status_request"
# Status requests in flight at once, over every job: polling must not become a load.
MAX_CONCURRENT = 50


@dataclass(frozen=True, slots=True)
class _Poll:
    """A job type's compiled status request."""

    config: StatusRequest
    url: TextTemplate
    headers: tuple[tuple[str, TextTemplate], ...]
    body: BodyTemplate | None
    outcome: OutcomeRule  # the job type's: judges a final answer
    working: OutcomeRule | None  # the same field or header, matching "still working"


def _compile(info: JobTypeInfo) -> _Poll:
    cfg = info.config.status_request
    assert cfg is not None
    where = f"job_types.{info.name}.status_request"
    headers = tuple(
        (name, compile_text(value, f"{where}.headers.{name}", secret=True))
        for name, value in cfg.headers.items()
    )
    body = None if cfg.body is None else compile_body(cfg.body, f"{where}.body")
    rule = info.outcome_rule
    working = None
    if cfg.working:
        if rule.field is None and rule.header is None:
            raise ValueError(
                f"{where}.working: the job type's outcome rule names no field or header to read"
            )
        working = OutcomeRule(field=rule.field, success=tuple(cfg.working), header=rule.header)
    return _Poll(cfg, compile_url(cfg.url, f"{where}.url"), headers, body, rule, working)


class StatusPolls(Loop):
    """A ``Loop``: every ``interval`` seconds, asks about overdue callbacks."""

    name = "status-polls"

    def __init__(
        self,
        job_types: JobTypes,
        loops: Mapping[str, QueueLoop],
        responses: ResponseWriter,
        clock: Callable[[], datetime],
        events: Events | None = None,
        interval: float = 0.25,
    ) -> None:
        # Compiled now: a bad template stops the service at start, naming the key.
        self.polls = {
            name: _compile(info)
            for name, info in job_types.items()
            if info.config.status_request is not None
        }
        super().__init__(log, "status polls", interval)
        self.loops, self.responses, self.clock = loops, responses, clock
        self.events = events or Events()
        self._asked: dict[tuple[int, int], datetime] = {}  # (job, attempt) -> next ask
        self._busy: set[tuple[int, int]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def wanted(cls, job_types: JobTypes) -> bool:
        return any(t.config.status_request is not None for t in job_types.values())

    async def starting(self) -> None:
        # As the http transport's client: no redirects followed, no cookies kept.
        self._client = httpx.AsyncClient(
            follow_redirects=False,
            transport=PooledTransport(MAX_CONCURRENT, MAX_CONCURRENT),
            cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])),
        )

    async def stopped(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def due(self, now: datetime) -> list[Job]:
        """Awaiting jobs of owned queues whose status request is due now."""
        out, live = [], set()
        for loop in self.loops.values():
            if loop.token is None:
                continue
            for job in loop.in_flight.values():
                poll = self.polls.get(job.type)
                if poll is None or job.state != State.AWAITING or job.claimed_at is None:
                    continue
                key = (job.id, job.attempt)
                live.add(key)
                first = job.claimed_at + timedelta(seconds=job.timeout_seconds * poll.config.after)
                if key not in self._busy and now >= self._asked.get(key, first):
                    out.append(job)
        for gone in self._asked.keys() - live:  # settled or retried: forget
            del self._asked[gone]
        return out

    async def run_once(self) -> int:
        """Start the status requests that are due; returns how many."""
        started = 0
        for job in self.due(self.clock()):
            if len(self._busy) >= MAX_CONCURRENT:
                break
            key = (job.id, job.attempt)
            self._busy.add(key)
            task = asyncio.create_task(self._ask(job), name=f"hipq-status-{job.id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started += 1
        return started

    async def _ask(self, job: Job) -> None:
        key = (job.id, job.attempt)
        poll = self.polls[job.type]
        verdict = "error"
        try:
            verdict = await self._exchange(job, poll)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a poll is best effort: the deadline still holds
            log.warning("job %s: status request failed: %s", job.id, _describe(exc))
        finally:
            self._busy.discard(key)
            every = poll.config.every
            if verdict == "final" or every is None:
                self._asked[key] = datetime.max.replace(tzinfo=self.clock().tzinfo)
            else:
                self._asked[key] = self.clock() + timedelta(seconds=every)
            self.events.emit("status_polled", type=job.type, verdict=verdict)

    async def _exchange(self, job: Job, poll: _Poll) -> str:
        """Send the request; store a final answer as the job's response. Returns
        final, working or error."""
        client = self._client
        assert client is not None
        cfg = poll.config
        context = job_context(job)
        try:
            url = poll.url.render(context)
            headers = {name: t.render(context) for name, t in poll.headers}
            if any("\r" in v or "\n" in v for v in headers.values()):
                raise RenderError("a header would contain a line break")
            content = None
            if poll.body is not None:
                content = orjson.dumps(poll.body.render(context))
                headers.setdefault("content-type", "application/json")
        except RenderError as exc:
            log.warning("job %s: status request template: %s", job.id, exc)
            return "error"
        request = client.build_request(
            cfg.method.upper(), url, headers=headers, content=content, timeout=cfg.timeout
        )
        async with asyncio.timeout(cfg.timeout):
            response = await client.send(request, stream=True)
            try:
                raw = await _read_capped(response, cfg.max_response_bytes)
            finally:
                await response.aclose()
        if response.status_code in cfg.working_statuses:
            return "working"
        if not 200 <= response.status_code < 300:
            log.warning("job %s: status request answered HTTP %s", job.id, response.status_code)
            return "error"
        body = parse_body(raw)
        answer_headers = dict(response.headers)
        if poll.working is not None and decide(poll.working, body, answer_headers).succeeded:
            return "working"
        assert job.correlation_key is not None  # awaiting jobs of external types have one
        stored = new_response(
            job.correlation_key,
            body,
            source=SOURCE,
            rule=poll.outcome,
            headers=answer_headers,
            # hipq asked this system itself: the answer is the job type's own, as a
            # verified callback is (it may settle a job whose callbacks must be signed).
            job_type=job.type,
        )
        await self.responses.write(stored)
        return "final"


async def _read_capped(response: httpx.Response, cap: int) -> bytes:
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            raise ValueError(f"the answer is over {cap} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def status_polls_of(service: Any) -> StatusPolls | None:
    """The activity for ``service``'s job types, or None when none declares a status
    request."""
    if not StatusPolls.wanted(service.job_types):
        return None
    try:
        return StatusPolls(
            service.job_types, service.loops, service.responses, service.clock, service.events
        )
    except ValueError as exc:  # a template or rule that cannot work: one line at start
        raise ServiceError(f"config error: {exc}") from None
