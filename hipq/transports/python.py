"""The ``python`` transport: an in-process async callable runs the job.

A job type names its handler as ``package.module:function``. The handler receives
a ``JobContext`` and returns a JSON-serialisable result, or raises. Raising
``PermanentError`` gives up without retries; raising ``Snooze`` (or calling
``job.snooze(seconds)``) runs it again later without spending an attempt.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import logging
import traceback
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, NoReturn

import orjson

from hipq.jobs import Job
from hipq.outcomes import Failed, Snoozed, Succeeded
from hipq.retry import AttemptError
from hipq.transports.base import JobTasks, Reporter

log = logging.getLogger("hipq.transports.python")

Handler = Callable[["JobContext"], Awaitable[Any]]
MAX_SNOOZE_SECONDS = 3650 * 86400
# A failed attempt keeps the end of its handler's traceback: the innermost frames and
# the exception, which say where it failed; a deep or chained one is cut at the top.
TRACEBACK_MAX_CHARS = 8192
TRACEBACK_CUT = "... (earlier frames cut)\n"
# A JobContext's payload before its handler first reads it (None is a value it may set).
_UNREAD: Any = object()


class PermanentError(Exception):
    """Raised by a handler: the job fails now, whatever its retry strategy says."""


class Snooze(Exception):
    """Raised by a handler (or ``JobContext.snooze``): run this job again after
    ``seconds`` without spending an attempt; its retry strategy is not asked."""

    def __init__(self, seconds: float, reason: str | None = None) -> None:
        if not 0 <= seconds <= MAX_SNOOZE_SECONDS:
            raise ValueError(f"snooze for 0 to {MAX_SNOOZE_SECONDS} seconds, not {seconds}")
        super().__init__(reason or f"snoozed for {seconds:g}s")
        self.seconds, self.reason = seconds, reason


class HandlerImportError(ValueError):
    pass


def import_handler(spec: str) -> Handler:
    module_name, _, attr = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise HandlerImportError(f"cannot import handler {spec!r}: {exc}") from None
    if not callable(target):
        raise HandlerImportError(f"handler {spec!r} is not callable")
    return target


class JobContext:
    """What a python handler sees of its job, and how it talks back to the loop."""

    # The job's fields a handler reads, each copied from the job's field of its name
    # (``labels`` as the handler's own dict; ``payload`` below, copied when first read).
    id: int
    type: str
    queue: str
    attempt: int
    weight: int
    critical: bool
    labels: dict[str, str]

    def __init__(self, job: Job, reporter: Reporter, clock: Callable[[], datetime]) -> None:
        for name, value in zip(_CONTEXT_FIELDS, _context_values(job), strict=True):
            setattr(self, name, value)
        self.labels = dict(job.labels)
        self._payload: Any = _UNREAD
        self._job, self._reporter, self._clock = job, reporter, clock

    @property
    def payload(self) -> dict[str, Any]:
        """The job's payload: the handler's own copy, made when first read (a handler
        that never reads it costs no copy), so nothing it does touches the loop's job."""
        if self._payload is _UNREAD:
            self._payload = copy.deepcopy(self._job.payload)
        payload: dict[str, Any] = self._payload
        return payload

    @payload.setter
    def payload(self, value: dict[str, Any]) -> None:
        self._payload = value

    def heartbeat(self, extend_by: float | None = None) -> None:
        """Push the deadline to now + ``extend_by`` seconds (default: the job's timeout)."""
        seconds = extend_by if extend_by is not None else self._job.timeout_seconds
        self._reporter.heartbeat(self._job, self._clock() + timedelta(seconds=seconds))

    def snooze(self, seconds: float, reason: str | None = None) -> NoReturn:
        """Stop here and run again after ``seconds``, without spending an attempt."""
        raise Snooze(seconds, reason)

    def checkpoint(self, payload: dict[str, Any]) -> None:
        """Persist ``payload``: a retry of this job starts from it."""
        self.payload = copy.deepcopy(payload)
        self._reporter.checkpoint(self._job, self.payload)


# JobContext's fields, read from the job in one call.
_CONTEXT_FIELDS = tuple(JobContext.__annotations__)
_context_values = attrgetter(*_CONTEXT_FIELDS)


class PythonTransport:
    def __init__(self, handlers: dict[str, Handler], clock: Callable[[], datetime]) -> None:
        self._handlers = handlers  # job type -> handler
        self._clock = clock
        self._tasks = JobTasks("hipq-job")

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        await self._tasks.cancel_all()

    def dispatch(self, job: Job, reporter: Reporter) -> None:
        self._tasks.start(job.id, self._run(job, reporter))

    def abandon(self, job_id: int) -> None:
        self._tasks.cancel(job_id)

    @property
    def ready(self) -> bool:
        return True  # in process: nothing to connect to

    @property
    def busy(self) -> int:
        return len(self._tasks)

    async def _run(self, job: Job, reporter: Reporter) -> None:
        handler = self._handlers[job.type]
        try:
            result = await handler(JobContext(job, reporter, self._clock))
            orjson.dumps(result)  # refuse a result the store could not keep
        except asyncio.CancelledError:
            raise
        except Snooze as exc:
            at = self._clock() + timedelta(seconds=exc.seconds)
            reporter.outcome(job, Snoozed(at, exc.reason))
        except PermanentError as exc:
            error = AttemptError(_describe(exc), retryable=False)
            reporter.outcome(job, Failed(error, traceback=handler_traceback(exc)))
        except orjson.JSONEncodeError as exc:
            reporter.outcome(job, Failed(AttemptError(f"result is not JSON: {exc}")))
        except Exception as exc:
            reporter.outcome(
                job, Failed(AttemptError(_describe(exc)), traceback=handler_traceback(exc))
            )
        else:
            reporter.outcome(job, Succeeded(result))


def handler_traceback(exc: BaseException, limit: int = TRACEBACK_MAX_CHARS) -> str:
    """``exc``'s traceback from the handler's frame inward (this module's frame left
    out), at most its last ``limit`` characters."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_frame.f_code is PythonTransport._run.__code__:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    if len(text) <= limit:
        return text
    return TRACEBACK_CUT + text[len(text) - limit + len(TRACEBACK_CUT) :]


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
