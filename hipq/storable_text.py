"""Text the database can store: PostgreSQL cannot store U+0000 in text or jsonb.

Refused on both engines alike, so that a job or a response accepted on SQLite
would be accepted on PostgreSQL too.
"""

from __future__ import annotations

from typing import Any

NUL_MESSAGE = "must not contain the NUL character (\\u0000)"


def nul_field(value: Any, where: str) -> str | None:
    """The path of a string (or key) in ``value`` holding U+0000, if any.

    Iterative: nesting deep enough to exhaust Python's recursion must get an answer.
    """
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return path
        elif isinstance(node, dict):
            for key, item in reversed(node.items()):
                inner = f"{path}.{key}"
                if "\x00" in str(key):
                    return inner.replace("\x00", "\\u0000")
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
