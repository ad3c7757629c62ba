"""The ``http`` transport: one pooled httpx client sends each job's request.

The request comes from the job type's template (method, URL, headers, body) plus
the callback URL, which carries the job's correlation key, in a header and/or a
body field. In callback mode a 2xx means "sent" and the job waits for its
callback; with ``callback: false`` the HTTP response is the result, judged by the
job type's outcome rule (none: every 2xx succeeds).

Connection errors, timeouts, 5xx, 429 and 3xx (redirects are never followed) are
failed attempts for the retry strategy, honouring ``Retry-After``; a 4xx fails
too, without retries if the job type lists it in ``non_retryable_statuses``.
Response bodies are read up to ``max_response_bytes``: a larger one fails the
attempt rather than filling memory.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import httpx
import orjson

from hipq.config import HttpTransport as HttpConfig
from hipq.job_types import JobTypeInfo
from hipq.jobs import Job
from hipq.observability import tracing
from hipq.outcome_rules import OutcomeRule, OutcomeRuleError, decide, parse_body, rule_for
from hipq.outcomes import Failed, Outcome, Snoozed, response_outcome
from hipq.retry import AttemptError
from hipq.templates import job_context
from hipq.transports.base import JobTasks, Reporter, report_send
from hipq.transports.http_pool import PooledTransport
from hipq.transports.rendering import (
    BodyTemplate,
    RenderError,
    RequestTemplateError,
    TextTemplate,
    compile_body,
    compile_text,
    compile_url,
)

# One client serves every job: allow many connections, since each job in flight
# may hold one until its peer answers (its pool's cost does not grow with them).
MAX_CONNECTIONS = 1000
MAX_IDLE_CONNECTIONS = 200
# Methods that carry no body; their callback URL goes in the header only.
_BODYLESS = frozenset({"GET", "HEAD"})
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


@dataclass(frozen=True, slots=True)
class _Route:
    """A job type's compiled request."""

    config: HttpConfig
    url: TextTemplate
    headers: tuple[tuple[str, TextTemplate], ...]
    body: BodyTemplate | None
    rule: OutcomeRule
    # keep_cookies: this job type's own jar (one per type, never shared); else None.
    cookies: httpx.Cookies | None = None


class _BodyTooLarge(Exception):
    pass


def _compile_route(info: JobTypeInfo) -> _Route:
    cfg = info.config.transport.http
    assert cfg is not None
    where = f"job_types.{info.name}.transport.http"
    if not cfg.method or not set(cfg.method) <= _TOKEN:
        raise RequestTemplateError(f"{where}.method: {cfg.method!r} is not an HTTP method")
    headers = []
    for name, value in cfg.headers.items():
        if not name or not set(name) <= _TOKEN:
            raise RequestTemplateError(f"{where}.headers: {name!r} is not a header name")
        headers.append((name, compile_text(value, f"{where}.headers.{name}", secret=True)))
    body = None if cfg.body is None else compile_body(cfg.body, f"{where}.body")
    try:
        rule = rule_for(info.config.outcome)
    except OutcomeRuleError as exc:
        raise RequestTemplateError(f"job_types.{info.name}.outcome: {exc}") from None
    jar = httpx.Cookies() if cfg.keep_cookies else None
    return _Route(cfg, compile_url(cfg.url, f"{where}.url"), tuple(headers), body, rule, jar)


class HttpTransport:
    def __init__(
        self,
        types: Mapping[str, JobTypeInfo],
        callback_base: str,
        clock: Callable[[], datetime],
    ) -> None:
        # Compiled now, so that a bad template stops the service at start.
        self._routes = {
            name: _compile_route(info)
            for name, info in types.items()
            if info.config.transport.http is not None
        }
        self._callback_base = callback_base.rstrip("/")
        self._clock = clock
        self._client: httpx.AsyncClient | None = None
        self._pool: PooledTransport | None = None
        self._tasks = JobTasks("hipq-http")

    @property
    def ready(self) -> bool:
        # Destinations are many and independent: one being down is a failed
        # attempt of its jobs, not an unready service.
        return True

    @property
    def busy(self) -> int:
        return len(self._tasks)

    async def start(self) -> None:
        if self._client is None:
            # The client builds requests (its default headers); they go to the pool
            # directly (``_exchange``).
            self._pool = PooledTransport(MAX_CONNECTIONS, MAX_IDLE_CONNECTIONS)
            self._client = httpx.AsyncClient(
                follow_redirects=False, transport=self._pool, timeout=30.0
            )

    async def stop(self) -> None:
        await self._tasks.cancel_all()
        if self._client is not None:
            await self._client.aclose()
            self._client = self._pool = None

    def dispatch(self, job: Job, reporter: Reporter) -> None:
        self._tasks.start(job.id, report_send("http", job, reporter, self._attempt(job)))

    def abandon(self, job_id: int) -> None:
        self._tasks.cancel(job_id)

    def callback_url(self, job: Job) -> str:
        key = quote(job.correlation_key or "", safe="")
        return f"{self._callback_base}/v1/callbacks/{key}?type={quote(job.type, safe='')}"

    async def _attempt(self, job: Job) -> Outcome | None:
        """None: sent (callback mode); else the attempt's outcome."""
        route = self._routes.get(job.type)
        client, pool = self._client, self._pool
        if route is None:
            return _failed(f"job type {job.type!r} has no http transport", retryable=False)
        if client is None or pool is None:
            return _failed("the http transport is not started")
        cfg = route.config
        if cfg.callback and not job.correlation_key:
            return _failed(
                "the job has no correlation key, so its callback could never be matched"
                f" (give job type {job.type} a correlation_key template, or the job a key)",
                retryable=False,
            )
        try:
            request = self._request(route, job, client)
        except RenderError as exc:
            return _failed(f"request template: {exc}", retryable=False)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError) as exc:
            return _failed(f"request cannot be built: {exc}", retryable=False)
        target = shown_url(request.url)
        if route.cookies is not None:
            route.cookies.set_cookie_header(request)
        try:
            async with asyncio.timeout(cfg.timeout):
                status, headers, content = await _exchange(pool, request, cfg.max_response_bytes)
        except (TimeoutError, httpx.TimeoutException):
            return _failed(f"no response from {target} within {cfg.timeout:g}s")
        except _BodyTooLarge:
            return _failed(f"response body over {cfg.max_response_bytes} bytes from {target}")
        except httpx.ConnectError as exc:
            return _failed(f"cannot connect to {target}: {_describe(exc)}")
        except httpx.LocalProtocolError as exc:
            return _failed(f"request to {target} cannot be sent: {exc}", retryable=False)
        except httpx.HTTPError as exc:
            return _failed(f"request to {target} failed: {_describe(exc)}")
        if route.cookies is not None:
            route.cookies.extract_cookies(httpx.Response(status, headers=headers, request=request))
        body = parse_body(content)
        if 200 <= status < 300:
            if cfg.callback:
                return None
            judgement = decide(route.rule, body, headers)
            return response_outcome(judgement.succeeded, judgement.reason, body)
        what = f"HTTP {status} from {target}"
        if 300 <= status < 400:
            what += f" (redirect to {headers.get('location', '?')} not followed)"
        retry_after = parse_retry_after(headers.get("retry-after"), self._clock())
        if retry_after is not None and status in cfg.snooze_statuses:
            return Snoozed(retry_after, f"{what}: Retry-After {headers.get('retry-after')}")
        error = AttemptError(
            what,
            kind="http",
            retryable=status not in cfg.non_retryable_statuses,
            retry_after=retry_after,
        )
        return Failed(error, response={"status": status, "body": body})

    def _request(self, route: _Route, job: Job, client: httpx.AsyncClient) -> httpx.Request:
        cfg = route.config
        context = job_context(job)
        url = route.url.render(context)
        headers = {name: t.render(context) for name, t in route.headers}
        for name, value in headers.items():
            if "\r" in value or "\n" in value:
                raise RenderError(f"header {name} would contain a line break")
        tracing.inject(headers)  # the attempt's traceparent, with tracing on
        callback = self.callback_url(job) if cfg.callback else None
        if callback is not None and cfg.callback_header:
            headers[cfg.callback_header] = callback
        method = cfg.method.upper()
        content = None
        if method not in _BODYLESS:
            body = route.body.render(context) if route.body is not None else job.payload
            if callback is not None and cfg.callback_field and isinstance(body, dict):
                body = {**body, cfg.callback_field: callback}
            elif callback is not None and not cfg.callback_header:
                raise RenderError(
                    "the body is not a JSON object, so it cannot carry the callback URL"
                    " (set callback_header)"
                )
            content = orjson.dumps(body)
            if not any(name.lower() == "content-type" for name in headers):
                headers["content-type"] = "application/json"
        elif callback is not None and not cfg.callback_header:
            raise RenderError(f"a {method} request carries the callback URL only in a header")
        return client.build_request(
            method, url, headers=headers, content=content, timeout=httpx.Timeout(cfg.timeout)
        )


async def _exchange(
    pool: httpx.AsyncBaseTransport, request: httpx.Request, cap: int
) -> tuple[int, httpx.Headers, bytes]:
    """Send and read the body, at most ``cap`` bytes of it.

    Straight to the pool, not through ``AsyncClient.send``: with no redirects, auth
    or hooks, all the client adds per request is its cookie jar, which parsed every
    response's headers (a tenth of the transport's CPU per job) to keep cookies
    that one job's target set for the next job's request, which they must not reach."""
    response = await pool.handle_async_request(request)
    response.request = request
    try:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise _BodyTooLarge
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > cap:
                raise _BodyTooLarge
            chunks.append(chunk)
    finally:
        await response.aclose()
    return response.status_code, response.headers, b"".join(chunks)


def parse_retry_after(value: str | None, now: datetime) -> datetime | None:
    """``Retry-After`` as an instant: delay-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            return None
        return now + timedelta(seconds=max(0.0, seconds))
    try:
        at = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if at.tzinfo is None:  # an HTTP date is always GMT
        at = at.replace(tzinfo=UTC)
    return max(at, now)


def _failed(message: str, retryable: bool = True) -> Failed:
    return Failed(AttemptError(message, kind="http", retryable=retryable))


def shown_url(url: httpx.URL | str) -> str:
    """``url`` as errors and logs show it: scheme, host and path only (the notifier's
    too). The query may carry tokens, and netloc leaves out any user:password."""
    if isinstance(url, str):
        url = httpx.URL(url)
    return f"{url.scheme}://{url.netloc.decode('ascii')}{url.path}"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
