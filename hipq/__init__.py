"""hipq: durable, throttled jobs against external systems.

The names below are what plugins and python handlers use. They load on first use,
so that the ``hipq`` command starts without importing the whole service.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "AttemptError": "hipq.retry",
    "Cancelled": "hipq.outcomes",
    "Failed": "hipq.outcomes",
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

__all__ = [*sorted(_EXPORTS), "__version__"]

if TYPE_CHECKING:
    from hipq.jobs import Job, Start  # noqa: F401
    from hipq.outcomes import Cancelled, Failed, Succeeded  # noqa: F401
    from hipq.retry import AttemptError, GiveUp, RetryAt, RetryStrategy  # noqa: F401
    from hipq.throttling import (  # noqa: F401
        InFlight,
        RunningView,
        ScanGroups,
        Throttler,
        ThrottlerBase,
        Verdict,
    )
    from hipq.transports.python import JobContext, PermanentError  # noqa: F401


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hipq' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
