"""Text the database can store: PostgreSQL cannot store U+0000 in text or jsonb.

Refused on both engines alike, so that a job or a response accepted on SQLite
would be accepted on PostgreSQL too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NUL_MESSAGE = "must not contain the NUL character (\\u0000)"
SURROGATE_MESSAGE = "must be text: a lone surrogate (\\ud800 to \\udfff) is not"


def _has_nul(text: str) -> bool:
    return "\x00" in text


def _unencodable(text: str) -> bool:
    # A lone surrogate half, which a JSON escape can spell, has no UTF-8 form.
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def nul_field(value: Any, where: str) -> str | None:
    """The path of a string (or key) in ``value`` holding U+0000, if any.

    Iterative: nesting deep enough to exhaust Python's recursion must get an answer.
    """
    return _field_where(value, where, _has_nul)


def surrogate_field(value: Any, where: str) -> str | None:
    """The path of a string (or key) in ``value`` holding a lone surrogate, if any."""
    return _field_where(value, where, _unencodable)


def _field_where(value: Any, where: str, bad: Callable[[str], bool]) -> str | None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if bad(node):
                return path
        elif isinstance(node, dict):
            for key, item in reversed(node.items()):
                inner = f"{path}.{key}"
                if bad(str(key)):
                    return inner.replace("\x00", "\\u0000").encode(errors="replace").decode()
                if isinstance(item, str | dict | list | tuple):
                    stack.append((item, inner))
        elif isinstance(node, list | tuple):
            for i in range(len(node) - 1, -1, -1):
                item = node[i]
                if isinstance(item, str | dict | list | tuple):
                    stack.append((item, f"{path}[{i}]"))
    return None


def storable(value: Any) -> Any:
    """``value`` itself, or ValueError (a 422 where a model validates it) if a string in
    it holds U+0000: refused, not a 500 from the database."""
    where = nul_field(value, "")
    if where is not None:
        raise ValueError(NUL_MESSAGE if not where else f"{where.lstrip('.')}: {NUL_MESSAGE}")
    return value
