"""jobs, attempts, queues (leases), idempotency keys

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
OPEN = "state IN ('scheduled', 'running', 'awaiting')"


def _partial(where: str) -> dict:
    return {"postgresql_where": sa.text(where), "sqlite_where": sa.text(where)}


def upgrade() -> None:
    op.create_table(
        "hipq_jobs",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(200), nullable=False),
        sa.Column("type", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("labels", JSON, nullable=False),
        sa.Column("windows", JSON, nullable=True),
        sa.Column("retry", JSON, nullable=False),
        sa.Column("run_at", UTCDateTime, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("weight", sa.Integer, nullable=False),
        sa.Column("timeout_seconds", sa.Float, nullable=False),
        sa.Column("critical", sa.Boolean, nullable=False),
        sa.Column("correlation_key", sa.String(500), nullable=True),
        sa.Column("job_key", sa.String(500), nullable=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("claimed_at", UTCDateTime, nullable=True),
        sa.Column("deadline", UTCDateTime, nullable=True),
        sa.Column("finished_at", UTCDateTime, nullable=True),
        sa.Column("result", JSON, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("waiting_reason", sa.Text, nullable=True),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
    )
    op.create_index(
        "ix_hipq_jobs_due_time", "hipq_jobs", ["queue", "state", "run_at", "priority", "id"]
    )
    op.create_index(
        "ix_hipq_jobs_due_priority", "hipq_jobs", ["queue", "state", "priority", "run_at", "id"]
    )
    op.create_index("ix_hipq_jobs_state", "hipq_jobs", ["state", "id"])
    op.create_index(
        "uq_hipq_jobs_open_correlation_key",
        "hipq_jobs",
        ["correlation_key"],
        unique=True,
        **_partial(f"correlation_key IS NOT NULL AND {OPEN}"),
    )
    op.create_index(
        "uq_hipq_jobs_open_job_key",
        "hipq_jobs",
        ["job_key"],
        unique=True,
        **_partial(f"job_key IS NOT NULL AND {OPEN}"),
    )
    op.create_index(
        "ix_hipq_jobs_cancel_requested", "hipq_jobs", ["queue"], **_partial("cancel_requested")
    )
    op.create_table(
        "hipq_attempts",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("job_id", ID, sa.ForeignKey("hipq_jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=True),
        sa.Column("finished_at", UTCDateTime, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("response", JSON, nullable=True),
    )
    op.create_index("ix_hipq_attempts_job", "hipq_attempts", ["job_id", "attempt"])
    op.create_table(
        "hipq_queues",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_token", sa.BigInteger, nullable=False),
        sa.Column("lease_expires_at", UTCDateTime, nullable=True),
    )
    op.create_table(
        "hipq_idempotency_keys",
        sa.Column("key", sa.String(300), primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("job_ids", JSON, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_hipq_idempotency_created", "hipq_idempotency_keys", ["created_at"])


def downgrade() -> None:
    op.drop_table("hipq_idempotency_keys")
    op.drop_table("hipq_queues")
    op.drop_table("hipq_attempts")
    op.drop_table("hipq_jobs")
