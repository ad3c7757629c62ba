"""A job's label in a query, on both engines, whatever its name.

SQLAlchemy reads ``labels[name]`` on SQLite as ``JSON_EXTRACT(labels, '$."name"')``,
and SQLite's JSON paths have no escape for a ``"`` inside a quoted key: such a name
made every filter on it a JSON path error (a 500). A name holding ``"`` is looked up
by its key in ``json_each`` there instead; every other name keeps the path (and
PostgreSQL, whose ``->>`` takes the name as a parameter, keeps it always).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement

__all__ = ["label_value"]


def label_value(labels: Any, name: str) -> ColumnElement[Any]:
    """The text of label ``name`` of the JSON column ``labels`` (NULL without it)."""
    if '"' not in name:
        return labels[name].as_string()  # type: ignore[no-any-return]
    return _QuotedName(labels, name)


class _QuotedName(ColumnElement[str]):
    type = String()
    inherit_cache = False  # rare: compiled each time rather than keyed for the cache

    def __init__(self, labels: Any, name: str) -> None:
        self.labels, self.name = labels, name


@compiles(_QuotedName)
def _by_path(element: _QuotedName, compiler: Any, **kw: Any) -> str:
    return compiler.process(element.labels[element.name].as_string(), **kw)  # type: ignore[no-any-return]


@compiles(_QuotedName, "sqlite")
def _by_key(element: _QuotedName, compiler: Any, **kw: Any) -> str:
    column = compiler.process(element.labels, **kw)
    key = compiler.process(bindparam(None, element.name, type_=String()), **kw)
    return f"(SELECT value FROM json_each({column}) WHERE key = {key})"
