"""Duration strings with a unit ("500ms", "1s", "5m", "24h", "7d"), as config and API speak them."""

from __future__ import annotations

import math
import re
from decimal import Decimal

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# ASCII digits only: Python's \d and float() also take other scripts' digits ("٣h").
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", re.ASCII)
# The longest duration hipq takes anywhere (a timeout, a window, a delay): ten years.
MAX_DURATION_SECONDS = 3650 * 86400.0


def parse_duration(value: object) -> float:
    """Seconds from a number (seconds) or a string such as "1h30m" or "250ms".

    Raises ValueError with a readable message; negative and non-finite values are refused.
    """
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '30s' or a number of seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        if not text:
            raise ValueError("empty duration")
        if not text.isascii():
            raise ValueError(f"invalid duration {value!r}: write it in ASCII digits, e.g. '30s'")
        try:
            seconds = float(text)
        except ValueError:
            pos, seconds = 0, 0.0
            for match in _PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNITS[match.group(2)]
                pos = match.end()
            if pos != len(text):
                raise ValueError(
                    f"invalid duration {value!r}: use a number and a unit (ms, s, m, h, d), "
                    "e.g. '30s' or '24h'"
                ) from None
    else:
        raise ValueError("expected a duration such as '30s' or a number of seconds")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"duration must be a finite, non-negative number of seconds: {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest exact unit string for a number of seconds (for display and config dumps)."""
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    if seconds < 1 and round(seconds * 1000, 6).is_integer():
        return f"{round(seconds * 1000)}ms"
    # repr() is the shortest exact form; Decimal spells it without an exponent, which
    # parse_duration would refuse ("1e+06s"); "{:g}" also rounded to 6 digits.
    text = format(Decimal(repr(float(seconds))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text}s"
