"""heartbeats of external jobs

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23

POST /v1/callbacks/{key}/heartbeat stores the last heartbeat of an external job's
attempt (its new deadline and its progress) here; the queue's loop takes the
pending ones and moves the job's deadline, as it does for a python handler's
heartbeat. A new table: nothing else is rewritten.
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "hipq_job_heartbeats",
        sa.Column(
            "job_id",
            ID,
            sa.ForeignKey("hipq_jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("queue", sa.String(200), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("beat_at", UTCDateTime, nullable=False),
        sa.Column("deadline", UTCDateTime, nullable=False),
        sa.Column("progress", JSON, nullable=True),
        sa.Column("pending", sa.Boolean, nullable=False),
    )
    op.create_index(
        "ix_hipq_job_heartbeats_pending",
        "hipq_job_heartbeats",
        ["queue"],
        postgresql_where=sa.text("pending"),
        sqlite_where=sa.text("pending"),
    )


def downgrade() -> None:
    op.drop_index("ix_hipq_job_heartbeats_pending", "hipq_job_heartbeats")
    op.drop_table("hipq_job_heartbeats")
