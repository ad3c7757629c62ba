"""hipq: durable, throttled jobs against external systems.

The names below are what plugins and python handlers use. They load on first use,
so that the ``hipq`` command starts without importing the whole service; type
checkers read them from the imports under ``TYPE_CHECKING`` and ``__all__``.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from hipq.version import __version__

# Written out, not computed: a type checker reads a literal list only, and takes a
# name missing from it as private ("does not explicitly export").
__all__ = [
    "AttemptError",
    "Cancelled",
    "Failed",
    "Feedback",
    "GiveUp",
    "InFlight",
    "Job",
    "JobContext",
    "PermanentError",
    "RetryAt",
    "RetryStrategy",
    "RunningView",
    "ScanGroups",
    "Start",
    "Succeeded",
    "Throttler",
    "ThrottlerBase",
    "Verdict",
    "__version__",
]

# Where each name lives, for ``__getattr__``.
_EXPORTS = {
    "AttemptError": "hipq.retry",
    "Cancelled": "hipq.outcomes",
    "Failed": "hipq.outcomes",
    "Feedback": "hipq.throttling",
    "GiveUp": "hipq.retry",
    "InFlight": "hipq.throttling",
    "Job": "hipq.jobs",
    "JobContext": "hipq.transports.python",
    "PermanentError": "hipq.transports.python",
    "RetryAt": "hipq.retry",
    "RetryStrategy": "hipq.retry",
    "RunningView": "hipq.throttling",
    "ScanGroups": "hipq.throttling",
    "Start": "hipq.jobs",
    "Succeeded": "hipq.outcomes",
    "Throttler": "hipq.throttling",
    "ThrottlerBase": "hipq.throttling",
    "Verdict": "hipq.throttling",
}

if TYPE_CHECKING:
    from hipq.jobs import Job, Start
    from hipq.outcomes import Cancelled, Failed, Succeeded
    from hipq.retry import AttemptError, GiveUp, RetryAt, RetryStrategy
    from hipq.throttling import (
        Feedback,
        InFlight,
        RunningView,
        ScanGroups,
        Throttler,
        ThrottlerBase,
        Verdict,
    )
    from hipq.transports.python import JobContext, PermanentError


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hipq' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
