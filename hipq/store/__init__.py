"""Storage: one interface (``Store``), SQLite and PostgreSQL behind it."""

from hipq.store.batch import QueueBatch
from hipq.store.pull_claims import PullReport
from hipq.store.records import (
    BadReference,
    Conflict,
    InsertResult,
    JobFilter,
    LeaseLost,
    Match,
    NewResponse,
    NotFound,
    ParkedMessage,
    QueueCounts,
    Response,
    StoreError,
    StoreSetupError,
)
from hipq.store.rows import row_to_job
from hipq.store.store import JobView, JobViews, Store

__all__ = [
    "BadReference",
    "Conflict",
    "InsertResult",
    "JobFilter",
    "JobView",
    "JobViews",
    "LeaseLost",
    "Match",
    "NewResponse",
    "NotFound",
    "ParkedMessage",
    "PullReport",
    "QueueBatch",
    "QueueCounts",
    "Response",
    "Store",
    "StoreError",
    "StoreSetupError",
    "row_to_job",
]
