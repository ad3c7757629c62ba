"""The jobs page's filter form, read from the query string into a ``JobQuery``.

The form comes from a person typing, so every bad value is reported by name (the
page shows it above the list) instead of being ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.datastructures import QueryParams

from hipq.api.jobs import MAX_LABEL_FILTERS
from hipq.api.paging import parse_id
from hipq.dashboard.display import utc_input
from hipq.ingest.job_in import EARLIEST, LATEST
from hipq.lifecycle import State
from hipq.storable_text import NUL_MESSAGE
from hipq.store.operator_reads import JobQuery

PAGE_SIZE = 50
STATES = [s.value for s in State]


class FilterError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True, slots=True)
class JobFilterForm:
    """The form as typed (to fill it in again) and the query it means."""

    values: dict[str, str]
    states: tuple[str, ...]
    labels: tuple[str, ...]
    query: JobQuery


def _text(params: QueryParams, name: str) -> str | None:
    value = (params.get(name) or "").strip()
    if "\x00" in value:
        raise FilterError(name, NUL_MESSAGE)
    return value or None


def _instant(params: QueryParams, name: str) -> datetime | None:
    """An RFC 3339 instant, or a browser's datetime-local value (read as UTC)."""
    value = _text(params, name)
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        # Near datetime's limits an offset (or the reads' slack) would overflow.
        instant = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise FilterError(
            name, f"{value!r} is not a date and time such as 2026-05-01T08:00"
        ) from None
    if not EARLIEST <= instant < LATEST:
        raise FilterError(name, "must be between 1970-01-01 and 9000-01-01")
    return instant


def parse_job_filter(params: QueryParams) -> JobFilterForm:
    states = tuple(dict.fromkeys(s for s in params.getlist("state") if s))
    for s in states:
        if s not in STATES:
            raise FilterError("state", f"{s!r} is not one of {', '.join(STATES)}")
    labels = tuple(x.strip() for p in params.getlist("label") for x in p.split(",") if x.strip())
    if len(labels) > MAX_LABEL_FILTERS:
        raise FilterError("label", f"at most {MAX_LABEL_FILTERS} label filters")
    label_map: dict[str, str] = {}
    for item in labels:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise FilterError("label", f"{item!r} must look like name:value")
        if "\x00" in item:
            raise FilterError("label", NUL_MESSAGE)
        label_map[name.strip()] = value.strip()
    before = _text(params, "before")
    before_id = parse_id(before) if before is not None else None
    if before is not None and before_id is None:
        raise FilterError("before", "not a cursor of this page")
    since, until = _instant(params, "since"), _instant(params, "until")
    if since and until and since > until:
        raise FilterError("until", "is before since")
    query = JobQuery(
        queue=_text(params, "queue"),
        states=states,
        type=_text(params, "type"),
        labels=label_map,
        job_key=_text(params, "job_key"),
        correlation_key=_text(params, "correlation_key"),
        created_since=since,
        created_until=until,
        before_id=before_id,
        retrying=_text(params, "retrying") is not None,
        limit=PAGE_SIZE,
    )
    values = {k: params.get(k) or "" for k in ("queue", "type", "job_key", "correlation_key")}
    # The inputs say UTC and take no zone: a bound given with an offset is shown in UTC.
    values["since"], values["until"] = utc_input(since), utc_input(until)
    return JobFilterForm(values, states, labels, query)


def bulk_filter(q: JobQuery) -> dict[str, Any] | None:
    """The job list's filter as POST /v1/jobs/bulk takes it (for "retry all" and
    "delete all"); None when there is none (a bulk verb needs a condition) or when
    the bulk API cannot say it (a correlation key, retrying jobs)."""
    if q.correlation_key is not None or q.retrying:
        return None
    out: dict[str, Any] = {}
    if q.queue:
        out["queue"] = q.queue
    if q.states:
        out["states"] = list(q.states)
    if q.type:
        out["type"] = q.type
    if q.labels:
        out["labels"] = dict(q.labels)
    if q.job_key is not None:
        out["job_key"] = q.job_key
    if q.created_since is not None:
        out["created_after"] = q.created_since.isoformat()
    if q.created_until is not None:
        # The list's "until" includes its instant; the bulk filter's created_before not.
        out["created_before"] = (q.created_until + timedelta(microseconds=1)).isoformat()
    return out or None


def page_link(params: QueryParams, before: int) -> str:
    """The query string of the next page: the same filters, a new cursor."""
    kept = [(k, v) for k, v in params.multi_items() if k != "before" and v]
    return str(QueryParams([*kept, ("before", str(before))]))


def state_link(params: QueryParams, state: str | None) -> str:
    """The query string of a state tab: the same filters, only ``state`` (None: any;
    ``retrying``: scheduled again after a failed attempt), from the first page."""
    tab = {"retrying": ("retrying", "1")}.get(state or "", ("state", state or ""))
    dropped = ("before", "state", "retrying")
    kept = [(k, v) for k, v in params.multi_items() if k not in dropped and v]
    return str(QueryParams([*kept, *([tab] if state else [])]))
