"""The cursor of the listing routes (jobs, responses, parked messages) and the ids of
the dashboard's URLs, checked once, and the byte budget of a page."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

import orjson
from fastapi import Depends, Query

from hipq.api.errors import InvalidParameter
from hipq.api.models import MAX_ID

# A page stops after the item that takes it past this many bytes of stored JSON: a
# count alone lets a page of big payloads grow to hundreds of MiB.
PAGE_BYTES = 4 * 1024 * 1024
_MAX_ID_DIGITS = len(str(MAX_ID))
T = TypeVar("T")


def parse_id(text: str) -> int | None:
    """``text`` as a row id or a cursor (an id, 0 to ``MAX_ID``); None when it is not one.

    The one check of an id read from a URL, for the API's cursors and the dashboard's.
    """
    # isdigit() alone lets through digits that are not ASCII ("²", "٣"), which int()
    # refuses or reads; ids past the database's bigint would fail in the query itself,
    # and int() refuses strings of more than 4,300 digits (a ValueError, not a 4xx).
    if not text.isascii() or not text.isdigit() or len(text) > _MAX_ID_DIGITS:
        return None
    value = int(text)
    return value if value <= MAX_ID else None


def after_id(
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> int | None:
    """The id a page starts after; None for the first page."""
    if cursor is None:
        return None
    after = parse_id(cursor)
    if after is None:
        raise InvalidParameter("cursor", "not a cursor returned by this API")
    return after


# A listing route's ``cursor`` query parameter, as the id its page starts after.
Cursor = Annotated[int | None, Depends(after_id)]


def json_size(*values: Any) -> int:
    """Bytes of ``values`` as JSON, for :func:`within_budget`."""
    return sum(len(orjson.dumps(v)) for v in values)


def within_budget(items: Sequence[T], size: Callable[[T], int]) -> Sequence[T]:
    """The first ``items`` up to and including the one that passes ``PAGE_BYTES``."""
    total = 0
    for i, item in enumerate(items):
        total += size(item)
        if total > PAGE_BYTES:
            return items[: i + 1]
    return items
