"""Text the database can store: PostgreSQL cannot store U+0000 in text or jsonb.

Refused on both engines alike, so that a job or a response accepted on SQLite
would be accepted on PostgreSQL too.
"""

from __future__ import annotations

from typing import Any

NUL_MESSAGE = "must not contain the NUL character (\\u0000)"


def nul_field(value: Any, where: str) -> str | None:
    """The path of the first string (or key) in ``value`` holding U+0000, if any."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{key}"
            if "\x00" in str(key):
                return inner.replace("\x00", "\\u0000")
            found = nul_field(item, inner)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            found = nul_field(item, f"{where}[{i}]")
            if found:
                return found
    return None
