"""hipq's Python client: the REST API, sync (:class:`Client`) and async
(:class:`AsyncClient`), with typed results. See docs/howto-client.md.

    from hipq.client import Client

    with Client("http://127.0.0.1:8000") as hipq:
        job = hipq.add_job("charge_card", {"order_id": "A-17"}, labels={"region": "east"})
        done = hipq.wait(job.id, timeout=120)
"""

from typing import TYPE_CHECKING, Any

from hipq.client.calls import Backoff
from hipq.client.errors import (
    ApiError,
    Conflict,
    ConnectionFailed,
    HipqError,
    InvalidRequest,
    NotFound,
    NotJson,
    ServerError,
    Unauthorized,
    WaitTimeout,
)
from hipq.client.models import (
    TERMINAL_STATES,
    AddedBatch,
    Attempt,
    Batch,
    BatchPage,
    BulkCount,
    BulkFilter,
    BulkOperation,
    BulkParams,
    FetchedJob,
    Fire,
    Fires,
    FireTimes,
    Heartbeat,
    Job,
    JobChanges,
    JobFields,
    JobPage,
    JobRef,
    NewJob,
    Queue,
    ReportResult,
    Reschedule,
    Response,
    ResponsePage,
    Schedule,
    ScheduleChanges,
    ScheduleFields,
    ScheduleRun,
    WorkerBeat,
    WorkerReport,
)
from hipq.client.sync import Client

if TYPE_CHECKING:
    from hipq.client.aio import AsyncClient


def __getattr__(name: str) -> Any:
    """:class:`AsyncClient` loads on first use: the ``hipq`` command's calls are
    blocking ones, and asyncio is a good part of an import they pay for each time."""
    if name == "AsyncClient":
        from hipq.client.aio import AsyncClient

        return AsyncClient
    raise AttributeError(f"module 'hipq.client' has no attribute {name!r}")


__all__ = [
    "TERMINAL_STATES",
    "AddedBatch",
    "ApiError",
    "AsyncClient",
    "Attempt",
    "Backoff",
    "Batch",
    "BatchPage",
    "BulkCount",
    "BulkFilter",
    "BulkOperation",
    "BulkParams",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "FetchedJob",
    "Fire",
    "FireTimes",
    "Fires",
    "Heartbeat",
    "HipqError",
    "InvalidRequest",
    "Job",
    "JobChanges",
    "JobFields",
    "JobPage",
    "JobRef",
    "NewJob",
    "NotFound",
    "NotJson",
    "Queue",
    "ReportResult",
    "Reschedule",
    "Response",
    "ResponsePage",
    "Schedule",
    "ScheduleChanges",
    "ScheduleFields",
    "ScheduleRun",
    "ServerError",
    "Unauthorized",
    "WaitTimeout",
    "WorkerBeat",
    "WorkerReport",
]
