"""Storage: one interface (``Store``), SQLite and PostgreSQL behind it."""

from hipq.store.records import (
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
)
from hipq.store.store import QueueBatch, Store, row_to_job

__all__ = [
    "Conflict",
    "InsertResult",
    "JobFilter",
    "LeaseLost",
    "Match",
    "NewResponse",
    "NotFound",
    "ParkedMessage",
    "QueueBatch",
    "QueueCounts",
    "Response",
    "Store",
    "StoreError",
    "row_to_job",
]
