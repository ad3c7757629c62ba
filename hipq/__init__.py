"""hipq: durable, throttled jobs against external systems."""

__version__ = "0.1.0"

from hipq.jobs import Job  # noqa: E402
from hipq.outcomes import Cancelled, Failed, Succeeded  # noqa: E402
from hipq.retry import AttemptError, GiveUp, RetryAt  # noqa: E402
from hipq.throttling import InFlight, RunningView, Start, Verdict  # noqa: E402
from hipq.transports.python import JobContext, PermanentError  # noqa: E402

__all__ = [
    "AttemptError",
    "Cancelled",
    "Failed",
    "GiveUp",
    "InFlight",
    "Job",
    "JobContext",
    "PermanentError",
    "RetryAt",
    "RunningView",
    "Start",
    "Succeeded",
    "Verdict",
    "__version__",
]
