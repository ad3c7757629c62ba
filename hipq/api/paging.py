"""The cursor of the listing routes (jobs, responses, parked messages), checked once."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query

from hipq.api.errors import InvalidParameter
from hipq.api.models import MAX_ID


def after_id(
    cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
) -> int | None:
    """The id a page starts after; None for the first page."""
    if cursor is None:
        return None
    # isdigit() alone lets through digits that are not ASCII ("²"), which int() refuses,
    # and ids past the database's bigint would fail in the query itself.
    if not cursor.isascii() or not cursor.isdigit() or int(cursor) > MAX_ID:
        raise InvalidParameter("cursor", "not a cursor returned by this API")
    return int(cursor)


# A listing route's ``cursor`` query parameter, as the id its page starts after.
Cursor = Annotated[int | None, Depends(after_id)]
