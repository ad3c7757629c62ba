"""Lifecycle log lines: one structured line per event an operator must see, fed by the
core's events (``hipq.events``) rather than logging calls spread through the loop.

The standard library's ``logging`` carries them, not structlog: every other line of a
hipq process (uvicorn, alembic, httpx, hipq's own warnings) is already a stdlib
record, and one formatter over the root handler gives all of them the same shape
(JSON or console) without a second logging system bridged into the first. The JSON
formatter is a few lines over orjson, which hipq already uses for its API.

What a line carries is chosen here, field by field: ids, queue, type, attempt, state
and a reason. Never a payload, a result, a response body or a header: those may hold
customers' data or secrets.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

from hipq.events import Events

log = logging.getLogger("hipq.lifecycle")

LogFormat = Literal["console", "json"]

# The attribute of a LogRecord that holds a lifecycle line's fields.
FIELDS_ATTR = "hipq_fields"

_SETTLED: dict[str, tuple[str, int]] = {
    # verdict -> (event, level)
    "completed": ("job_completed", logging.DEBUG),
    "retried": ("job_retried", logging.WARNING),
    "failed": ("job_failed", logging.ERROR),
    "given_up": ("job_given_up", logging.ERROR),
    "cancelled": ("job_cancelled", logging.INFO),
}

_RESPONSES: dict[str, tuple[str, int]] = {
    # inbox status -> (event, level). "expired": no job ever took it before its TTL.
    "expired": ("responses_unknown", logging.WARNING),
    "late": ("responses_late", logging.INFO),
    "late_accepted": ("responses_late_accepted", logging.INFO),
    "duplicate": ("responses_duplicate", logging.DEBUG),
}

Line = tuple[int, str, dict[str, Any]]

# Events that are counted, never logged: skipped before any work.
_UNLOGGED = frozenset({"jobs_admitted", "jobs_sent", "responses_stored", "throttled"})


def describe(name: str, f: Mapping[str, Any]) -> Line | None:
    """The log line (level, event, fields) of a core event, or None if it is not logged."""
    if name == "job_settled":
        return _settled(f)
    if name == "lease_acquired":
        fields = _pick(f, "queue", "token", "resumed")
        return logging.INFO, "lease_taken", fields
    if name == "lease_lost":
        return logging.WARNING, "lease_lost", _pick(f, "queue", "token")
    if name == "lease_handed_back":  # another process's share now
        return logging.INFO, "lease_handed_back", _pick(f, "queue", "token")
    if name == "throttler_error":
        fields = {**_pick(f, "queue", "throttler"), "reason": f.get("error")}
        return logging.ERROR, "throttler_fault", fields
    if name == "response_parked":
        fields = _pick(f, "source", "reason", "partition", "offset")
        return logging.WARNING, "response_parked", fields
    if name == "responses_settled" and f.get("status") in _RESPONSES:
        event, level = _RESPONSES[f["status"]]
        return level, event, _pick(f, "queue", "count")
    if name == "notification_sent":
        return logging.DEBUG, "notification_sent", _pick(f, "id", "job_id", "target")
    if name == "notification_failed":
        fields = {**_pick(f, "id", "job_id", "target", "attempts"), "reason": f.get("error")}
        return logging.WARNING, "notification_failed", fields
    if name == "schedule_fired":
        fields = _pick(f, "schedule", "job_id", "queue", "type", "fire_time")
        # A caught-up fire time is counted in its backfill's one summary line.
        return logging.DEBUG if f.get("backfill") else logging.INFO, "schedule_fired", fields
    if name == "schedule_backfilled":
        fields = _pick(f, "schedule", "jobs", "first", "last")
        return logging.INFO, "schedule_backfilled", fields
    return None


def _settled(f: Mapping[str, Any]) -> Line:
    verdict = f.get("verdict") or f.get("state", "")
    event, level = _SETTLED.get(verdict, ("job_settled", logging.INFO))
    fields = _pick(f, "job_id", "queue", "type", "attempt", "state")
    if f.get("error_kind") == "timeout" and verdict in ("retried", "failed", "given_up"):
        # The timeout is what the operator looks for; what followed it is a field.
        event, fields["then"] = "job_timed_out", verdict
    if f.get("error"):
        fields["reason"] = f["error"]
    if f.get("error_kind"):
        fields["error_kind"] = f["error_kind"]
    if verdict == "retried" and f.get("run_at") is not None:
        fields["run_at"] = f["run_at"]
    if f.get("traceback"):
        # A python handler's exception: logged here once, with the attempt it failed.
        fields["traceback"] = f["traceback"]
    return level, event, fields


def _pick(f: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {n: f[n] for n in names if f.get(n) is not None}


class LifecycleLog:
    """Subscribes to a service's events and writes their lines to ``hipq.lifecycle``."""

    def __init__(self, events: Events, logger: logging.Logger = log) -> None:
        self.logger = logger
        events.subscribe(self.on_event)

    def on_event(self, name: str, fields: dict[str, Any]) -> None:
        if name in _UNLOGGED or (
            # The hot path: a completion is a DEBUG line, off by default.
            fields.get("verdict") == "completed" and not self.logger.isEnabledFor(logging.DEBUG)
        ):
            return
        line = describe(name, fields)
        if line is None:
            return
        level, event, values = line
        if self.logger.isEnabledFor(level):
            self.logger.log(level, event, extra={FIELDS_ATTR: values})


# -- formats ------------------------------------------------------------------------


def _text(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str):
        if value and not any(c.isspace() or c in "\"'=" for c in value):
            return value
        return orjson.dumps(value).decode()
    return str(value)


# Characters that would end or rewrite a line on a terminal (other than the newline a
# traceback is split on), shown escaped.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
# Marks each line of a traceback below its event.
TRACEBACK_MARK = "  | "


def traceback_lines(text: str) -> str:
    """A traceback as lines below its event, each marked and with control characters
    escaped: a pull worker sends its traceback's text, which must not pass for log
    lines of their own."""
    escaped = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
    return "".join(f"\n{TRACEBACK_MARK}{line}" for line in escaped.rstrip("\n").split("\n"))


class ConsoleFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...`` (values with spaces quoted); a
    ``traceback`` field follows on its own marked lines, as an exception's does."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        fields = getattr(record, FIELDS_ATTR, None)
        if fields:
            line += "".join(f" {k}={_text(v)}" for k, v in fields.items() if k != "traceback")
            if fields.get("traceback"):
                line += traceback_lines(str(fields["traceback"]))
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, event, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key, value in (getattr(record, FIELDS_ATTR, None) or {}).items():
            out.setdefault(key, value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure_logging(level: str, fmt: LogFormat = "console") -> None:
    """The process's one handler (stderr) in the chosen format; every logger, uvicorn's
    included, propagates to it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else ConsoleFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Alembic announces each of its plugins at import, at INFO: seven lines on every
    # start, ahead of a config error's one line.
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    # At DEBUG SQLAlchemy's engine and aiosqlite log every statement with its
    # parameters (payloads, results, callback bodies): not even a debug log holds those.
    for name in ("sqlalchemy.engine", "aiosqlite"):
        logging.getLogger(name).setLevel(logging.WARNING)
