"""The requests the client makes and when it sends one again: pure code shared by the
sync and the async client (which only differ in how they wait and send)."""

from __future__ import annotations

import math
import os
import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, NamedTuple
from urllib.parse import quote

import httpx
from pydantic_core import to_jsonable_python

from hipq.client.errors import ApiError, ConnectionFailed, HipqError, NotJson

DEFAULT_URL = "http://127.0.0.1:8000"
TOKEN_ENV = "HIPQ_TOKEN"
URL_ENV = "HIPQ_URL"

# Transport errors raised before the request left: sending it again cannot make a
# second anything, whatever the request. After any other one (a read timeout, a
# connection closed mid-answer) the server may have acted on it.
NOT_SENT: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)

# The longest ?wait= asked of the server per request; a longer wait() makes several.
MAX_SERVER_WAIT_SECONDS = 30


@dataclass(frozen=True)
class Call:
    """One API request. ``idempotent``: sending it twice has the effect of sending it
    once (reads, keyed creates, pause), so it is retried after any transport error."""

    method: str
    path: str
    params: list[tuple[str, str | int]] = field(default_factory=list)
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool = False
    read_timeout: float | None = None  # longer than the client's, for a server-side wait

    def request_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"params": self.params, "headers": dict(self.headers)}
        if self.body is not None:
            body = to_jsonable_python(self.body)
            _refuse_non_json(body, "")
            kwargs["json"] = body
        if self.read_timeout is not None:
            kwargs["timeout"] = self.read_timeout
        return kwargs


@dataclass(frozen=True)
class Backoff:
    """Delays between the tries of one call: exponential with jitter, at least what the
    server's Retry-After asks; no more tries once ``budget`` seconds have gone by."""

    first: float = 0.2
    multiplier: float = 2.0
    cap: float = 5.0
    budget: float = 30.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        ceiling = min(self.cap, self.first * self.multiplier**attempt)
        # Full jitter over the upper half: clients refused together do not come back together.
        chosen = random.uniform(ceiling / 2, ceiling)
        return max(chosen, retry_after) if retry_after is not None else chosen


def retry_after(response: httpx.Response, now: datetime | None = None) -> float | None:
    """Retry-After in seconds (a number or an HTTP date); None when absent or unreadable."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    # isdigit() alone passes "²" (a latin-1 header byte), which float() refuses.
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def retry_delay(
    call: Call, outcome: httpx.Response | Exception, attempt: int, backoff: Backoff
) -> float | None:
    """How long to wait before sending ``call`` again after ``outcome``; None: do not."""
    if isinstance(outcome, httpx.Response):
        # hipq's 503s (database unavailable, starting, too many connections) and 429s
        # (too many ?wait= requests of one token) stored nothing.
        if outcome.status_code not in (429, 503):
            return None
        return backoff.delay(attempt, retry_after(outcome))
    if isinstance(outcome, NOT_SENT) or (
        call.idempotent and isinstance(outcome, httpx.TransportError)
    ):
        return backoff.delay(attempt)
    return None


def token_from(token: str | None) -> str | None:
    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and (not token.isascii() or not token.isprintable()):
        raise HipqError(f"{TOKEN_ENV} holds characters no token has (see `hipq tokens new`)")
    return token


def url_from(url: str | None) -> str:
    return (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")


def new_idempotency_key() -> str:
    return f"hipq-client-{uuid.uuid4()}"


def _segment(value: str | int) -> str:
    return quote(str(value), safe="")


def _present(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def label_filters(labels: Mapping[str, str] | None) -> list[tuple[str, str | int]]:
    """``label=name:value`` query parameters, the one spelling of a label filter."""
    return [("label", f"{name}:{value}") for name, value in (labels or {}).items()]


# -- jobs ---------------------------------------------------------------------------------


def add_job(job: Mapping[str, Any], key: str | None) -> Call:
    return Call(
        "POST",
        "/v1/jobs",
        body=_present(job),
        headers={"Idempotency-Key": key or new_idempotency_key()},
        idempotent=True,
    )


def add_jobs(
    jobs: Iterable[Mapping[str, Any]], key: str | None, batch: Mapping[str, Any] | None = None
) -> Call:
    body: dict[str, Any] = {"jobs": [_present(j) for j in jobs]}
    if batch is not None:
        body["batch"] = _present(batch)
    return Call(
        "POST",
        "/v1/jobs/batch",
        body=body,
        headers={"Idempotency-Key": key or new_idempotency_key()},
        idempotent=True,
    )


def get_job(job_id: int, wait_seconds: int = 0, read_timeout: float | None = None) -> Call:
    params: list[tuple[str, str | int]] = [("wait", f"{wait_seconds}s")] if wait_seconds else []
    return Call(
        "GET",
        f"/v1/jobs/{_segment(job_id)}",
        params=params,
        idempotent=True,
        read_timeout=read_timeout,
    )


def list_jobs(
    *,
    queue: str | None,
    states: Iterable[str] | None,
    type: str | None,
    labels: Mapping[str, str] | None,
    limit: int,
    cursor: str | None,
) -> Call:
    params: list[tuple[str, str | int]] = [("limit", limit)]
    params += [("queue", queue)] if queue is not None else []
    params += [("type", type)] if type is not None else []
    params += [("state", s) for s in states or ()]
    params += label_filters(labels)
    params += [("cursor", cursor)] if cursor is not None else []
    return Call("GET", "/v1/jobs", params=params, idempotent=True)


def cancel_job(job_id: int, reason: str | None = None) -> Call:
    body = {"reason": reason} if reason is not None else None
    return Call("POST", f"/v1/jobs/{_segment(job_id)}/cancel", body=body)


# The operator's verbs below are not sent again once they may have arrived: a second
# one is refused (the job has moved on) or, for bulk, starts a second operation.


def complete_job(job_id: int, result: Any) -> Call:
    return Call("POST", f"/v1/jobs/{_segment(job_id)}/complete", body={"result": result})


def fail_job(job_id: int, reason: str) -> Call:
    return Call("POST", f"/v1/jobs/{_segment(job_id)}/fail", body={"reason": reason})


def reschedule_job(job_id: int, fields: Mapping[str, Any]) -> Call:
    return Call("POST", f"/v1/jobs/{_segment(job_id)}/reschedule", body=_present(fields))


def delete_job(job_id: int) -> Call:
    return Call("DELETE", f"/v1/jobs/{_segment(job_id)}")


def get_job_by_key(job_key: str) -> Call:
    return Call("GET", f"/v1/jobs/by-key/{_segment(job_key)}", idempotent=True)


def cancel_job_by_key(job_key: str) -> Call:
    return Call("POST", f"/v1/jobs/by-key/{_segment(job_key)}/cancel")


def start_bulk(
    action: str, filter: Mapping[str, Any], dry_run: bool, params: Mapping[str, Any]
) -> Call:
    body = {"action": action, "filter": _present(filter), "dry_run": dry_run, **_present(params)}
    # A dry run changes nothing: safe to send again.
    return Call("POST", "/v1/jobs/bulk", body=body, idempotent=dry_run)


def get_batch(batch_id: int) -> Call:
    return Call("GET", f"/v1/batches/{_segment(batch_id)}", idempotent=True)


def create_batch(batch: Mapping[str, Any]) -> Call:
    # Not sent again after a lost answer: a second open batch would be made.
    return Call("POST", "/v1/batches", body=_present(batch))


def seal_batch(batch_id: int) -> Call:
    # Sealing a sealed batch changes nothing: safe to send again.
    return Call("POST", f"/v1/batches/{_segment(batch_id)}/seal", idempotent=True)


def list_batches(limit: int, cursor: str | None) -> Call:
    return Call("GET", "/v1/batches", params=_page(limit, cursor), idempotent=True)


def list_batch_jobs(batch_id: int, limit: int, cursor: str | None) -> Call:
    path = f"/v1/batches/{_segment(batch_id)}/jobs"
    return Call("GET", path, params=_page(limit, cursor), idempotent=True)


def _page(limit: int, cursor: str | None) -> list[tuple[str, str | int]]:
    params: list[tuple[str, str | int]] = [("limit", limit)]
    if cursor is not None:
        params.append(("cursor", cursor))
    return params


def get_bulk(bulk_id: int) -> Call:
    return Call("GET", f"/v1/jobs/bulk/{_segment(bulk_id)}", idempotent=True)


def list_bulk() -> Call:
    return Call("GET", "/v1/jobs/bulk", idempotent=True)


def retry_job(job_id: int, run_at: datetime | str | None) -> Call:
    body = {"run_at": run_at} if run_at is not None else None
    return Call("POST", f"/v1/jobs/{_segment(job_id)}/retry", body=body)


def change_job(job_id: int, changes: Mapping[str, Any]) -> Call:
    # Not sent again once it may have arrived: the job may have started meanwhile, and
    # the second change's 409 would hide that the first one took effect.
    return Call("PATCH", f"/v1/jobs/{_segment(job_id)}", body=dict(changes))


# -- queues -------------------------------------------------------------------------------


def list_queues() -> Call:
    return Call("GET", "/v1/queues", idempotent=True)


def get_queue(name: str) -> Call:
    return Call("GET", f"/v1/queues/{_segment(name)}", idempotent=True)


def pause_queue(name: str, paused: bool) -> Call:
    verb = "pause" if paused else "resume"
    return Call("POST", f"/v1/queues/{_segment(name)}/{verb}", idempotent=True)


def set_forbidden_flags(name: str, flags: Iterable[str]) -> Call:
    body = {"flags": list(flags)}
    return Call("PUT", f"/v1/queues/{_segment(name)}/forbidden-flags", body=body, idempotent=True)


def change_limits(name: str, changes: Mapping[str, Any]) -> Call:
    # Sent again safely: each setting given replaces its own value.
    body = dict(changes)
    return Call("PATCH", f"/v1/queues/{_segment(name)}/limits", body=body, idempotent=True)


def reset_limits(name: str) -> Call:
    return Call("DELETE", f"/v1/queues/{_segment(name)}/limits", idempotent=True)


# -- schedules ----------------------------------------------------------------------------


def list_schedules() -> Call:
    return Call("GET", "/v1/schedules", idempotent=True)


def get_schedule(name: str) -> Call:
    return Call("GET", f"/v1/schedules/{_segment(name)}", idempotent=True)


def create_schedule(fields: Mapping[str, Any]) -> Call:
    return Call("POST", "/v1/schedules", body=_present(fields))


def change_schedule(name: str, changes: Mapping[str, Any]) -> Call:
    return Call("PATCH", f"/v1/schedules/{_segment(name)}", body=dict(changes), idempotent=True)


def delete_schedule(name: str) -> Call:
    return Call("DELETE", f"/v1/schedules/{_segment(name)}")


def pause_schedule(name: str, paused: bool) -> Call:
    verb = "pause" if paused else "resume"
    return Call("POST", f"/v1/schedules/{_segment(name)}/{verb}", idempotent=True)


def run_schedule(name: str) -> Call:
    return Call("POST", f"/v1/schedules/{_segment(name)}/run")


def next_fire_times(name: str, count: int) -> Call:
    return Call(
        "GET", f"/v1/schedules/{_segment(name)}/next", params=[("count", count)], idempotent=True
    )


def schedule_fires(name: str, limit: int) -> Call:
    return Call(
        "GET", f"/v1/schedules/{_segment(name)}/fires", params=[("limit", limit)], idempotent=True
    )


# -- responses ----------------------------------------------------------------------------


def list_responses(
    *,
    statuses: Iterable[str] | None,
    matched: bool | None,
    key: str | None,
    limit: int,
    cursor: str | None,
) -> Call:
    params: list[tuple[str, str | int]] = [("limit", limit)]
    params += [("status", s) for s in statuses or ()]
    params += [("matched", "true" if matched else "false")] if matched is not None else []
    params += [("key", key)] if key is not None else []
    params += [("cursor", cursor)] if cursor is not None else []
    return Call("GET", "/v1/responses", params=params, idempotent=True)


def get_response(response_id: int) -> Call:
    return Call("GET", f"/v1/responses/{_segment(response_id)}", idempotent=True)


def match_response(response_id: int, job_id: int, accept_unsigned: bool) -> Call:
    body: dict[str, Any] = {"job_id": job_id}
    if accept_unsigned:
        body["accept_unsigned"] = True
    return Call("POST", f"/v1/responses/{_segment(response_id)}/match", body=body)


# -- pull workers ------------------------------------------------------------------------


def fetch_jobs(
    types: Iterable[str], count: int, wait: float, worker: str | None, weight: int | None = None
) -> Call:
    """Not sent again after a transport error: the jobs of a lost answer are taken,
    and come back only after their timeout."""
    body: dict[str, Any] = {"types": list(types), "count": count, "wait": wait}
    if worker is not None:
        body["worker"] = worker
    if weight is not None:
        body["weight"] = weight
    return Call("POST", "/v1/workers/fetch", body=body, read_timeout=wait + 30)


def worker_report(job_id: int, verb: str, token: str, fields: Mapping[str, Any]) -> Call:
    """A report on a fetched job: sent again after a lost answer, a second report of
    the same attempt changes nothing."""
    body = {"token": token, **fields}
    return Call("POST", f"/v1/workers/jobs/{_segment(job_id)}/{verb}", body=body, idempotent=True)


def worker_reports(reports: Iterable[Mapping[str, Any]]) -> Call:
    """Outcomes of many fetched jobs: sent again after a lost answer, a report taken
    before is accepted again and changes nothing."""
    body = {"reports": [dict(r) for r in reports]}
    return Call("POST", "/v1/workers/reports", body=body, idempotent=True)


def openapi() -> Call:
    return Call("GET", "/openapi.json", idempotent=True)


def offers_wait(schema: Any) -> bool:
    """Whether the server's OpenAPI schema has ``GET /v1/jobs/{job_id}?wait=``."""
    try:
        parameters = schema["paths"]["/v1/jobs/{job_id}"]["get"].get("parameters", [])
    except (KeyError, TypeError, AttributeError):
        return False
    return any(isinstance(p, dict) and p.get("name") == "wait" for p in parameters)


# -- answers ------------------------------------------------------------------------------


def answer_or_raise(url: str, answer: httpx.Response | httpx.TransportError) -> httpx.Response:
    """The answer of a call whose tries have ended, or the exception it stands for."""
    if isinstance(answer, httpx.TransportError):
        raise ConnectionFailed(url, answer) from answer
    if answer.status_code >= 400:
        raise ApiError.of(answer)
    return answer


class Readiness(NamedTuple):
    """/readyz's answer: ``ready``, its HTTP status (None: no answer) and its report,
    whose ``problems`` say what is not ready."""

    ready: bool
    status_code: int | None
    report: dict[str, Any]


def readiness(answer: httpx.Response | httpx.TransportError) -> Readiness:
    if isinstance(answer, httpx.TransportError):
        why = f"{type(answer).__name__}: {answer}" if str(answer) else type(answer).__name__
        return Readiness(False, None, {"problems": {"connection": why}})
    try:
        body = answer.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"problems": {"http": f"HTTP {answer.status_code}"}}
    return Readiness(answer.status_code == 200, answer.status_code, body)


# -- waiting ------------------------------------------------------------------------------


@dataclass
class Waiter:
    """The calls of one ``wait()``: each asks the server to hold its answer (``?wait=``)
    when it offers that, else polls with a growing pause; none past ``timeout``."""

    timeout: float
    started: float
    long_poll: bool
    read_timeout: float
    first: float = 0.05
    multiplier: float = 1.5
    cap: float = 2.0
    _polls: int = 0
    _asked: int = 0

    def remaining(self, now: float) -> float:
        return self.started + self.timeout - now

    def next_call(self, job_id: int, now: float) -> Call:
        self._asked = (
            int(min(self.remaining(now), MAX_SERVER_WAIT_SECONDS)) if self.long_poll else 0
        )
        if not self._asked:
            return get_job(job_id)
        # The answer may take the whole wait: the read timeout covers it.
        return get_job(job_id, self._asked, read_timeout=self._asked + self.read_timeout)

    def pause(self, now: float, sent: float) -> float | None:
        """Seconds to sleep before the next call; None: the time is up."""
        remaining = self.remaining(now)
        if remaining <= 0:
            return None
        if self._asked and now - sent >= self._asked / 2:
            return 0.0  # the server held the call: ask again at once
        pause = min(self.cap, self.first * self.multiplier**self._polls)
        self._polls += 1
        return min(pause, remaining)


@dataclass
class ReadyWaiter:
    """Pauses between /readyz calls until ``timeout`` has passed."""

    timeout: float
    started: float
    pause_seconds: float = 0.25

    def pause(self, now: float) -> float | None:
        remaining = self.started + self.timeout - now
        return min(self.pause_seconds, remaining) if remaining > 0 else None

    def give_up(self, url: str, report: Mapping[str, Any]) -> str:
        problems = report.get("problems") or {}
        why = (
            "; ".join(f"{k}: {v}" for k, v in problems.items())
            if isinstance(problems, dict)
            else ""
        )
        return f"hipq at {url} not ready after {self.timeout:g}s" + (f" ({why})" if why else "")


def _refuse_non_json(value: Any, field: str) -> None:
    """Raise :class:`NotJson` naming the first float JSON cannot carry, before sending
    (httpx would raise a bare ``ValueError`` that names nothing)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise NotJson(field or "body", value)
    if isinstance(value, dict):
        for key, item in value.items():
            _refuse_non_json(item, f"{field}.{key}" if field else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _refuse_non_json(item, f"{field}[{i}]")
