"""Storage: one interface (``Store``), SQLite and PostgreSQL behind it."""

from hipq.store.records import (
    Conflict,
    InsertResult,
    JobFilter,
    LeaseLost,
    Match,
    NewResponse,
    ParkedMessage,
    Response,
    NotFound,
    QueueCounts,
    Settlement,
    StoreError,
)
from hipq.store.store import QueueBatch, Store, row_to_job

__all__ = [
    "Conflict",
    "InsertResult",
    "JobFilter",
    "LeaseLost",
    "Match",
    "NewResponse",
    "ParkedMessage",
    "Response",
    "NotFound",
    "QueueBatch",
    "QueueCounts",
    "Settlement",
    "Store",
    "StoreError",
    "row_to_job",
]
