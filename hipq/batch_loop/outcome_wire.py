"""An attempt's outcome as JSON, to travel from an executor (``hipq.process.executor``)
to its queue's owner in a report row, and back (pure)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from hipq.outcomes import (
    Cancelled,
    Failed,
    FailedByOperator,
    Outcome,
    Rescheduled,
    Snoozed,
    Succeeded,
)
from hipq.retry import AttemptError

_KINDS: dict[str, type[Any]] = {
    t.__name__: t
    for t in (Succeeded, Failed, Cancelled, FailedByOperator, Rescheduled, Snoozed, AttemptError)
}
# The fields of a record that are instants or records themselves are named in the
# record's own object: a user's value (a result, a response) is kept as it is.
_TYPE, _INSTANTS, _RECORDS = "$type", "$instants", "$records"


def encode(outcome: Outcome) -> dict[str, Any]:
    """``outcome`` as a JSON object (instants as ISO strings, nested records tagged)."""
    return _encode(outcome)


def decode(body: dict[str, Any]) -> Outcome:
    """The outcome ``encode`` wrote; ``ValueError`` for an unknown kind."""
    found = _decode(body)
    if isinstance(found, AttemptError):
        raise ValueError(f"not an outcome: {body!r}")
    return found  # type: ignore[no-any-return]


def _encode(record: Any) -> dict[str, Any]:
    out: dict[str, Any] = {_TYPE: type(record).__name__}
    instants, records = [], []
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if isinstance(value, datetime):
            instants.append(field.name)
            value = value.isoformat()
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            records.append(field.name)
            value = _encode(value)
        out[field.name] = value
    if instants:
        out[_INSTANTS] = instants
    if records:
        out[_RECORDS] = records
    return out


def _decode(body: dict[str, Any]) -> Any:
    kind = _KINDS.get(body.get(_TYPE, ""))
    if kind is None:
        raise ValueError(f"unknown outcome kind {body.get(_TYPE)!r}")
    instants, records = set(body.get(_INSTANTS, ())), set(body.get(_RECORDS, ()))
    fields = {}
    for name, value in body.items():
        if name in (_TYPE, _INSTANTS, _RECORDS):
            continue
        if name in instants:
            value = datetime.fromisoformat(value)
        elif name in records:
            value = _decode(value)
        fields[name] = value
    return kind(**fields)
