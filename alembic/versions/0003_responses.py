"""responses inbox and parked messages

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "hipq_responses",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("correlation_key", sa.String(500), nullable=False),
        sa.Column("source", sa.String(300), nullable=False),
        sa.Column("received_at", UTCDateTime, nullable=False),
        sa.Column("expires_at", UTCDateTime, nullable=False),
        sa.Column("succeeded", sa.Boolean, nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("body", JSON, nullable=True),
        sa.Column("headers", JSON, nullable=True),
        sa.Column("job_type", sa.String(200), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("job_id", ID, nullable=True),
        sa.Column("forced_job_id", ID, nullable=True),
        sa.Column("settled_at", UTCDateTime, nullable=True),
    )
    op.create_index(
        "ix_hipq_responses_pending_key",
        "hipq_responses",
        ["correlation_key"],
        postgresql_where=sa.text("status = 'pending'"),
        sqlite_where=sa.text("status = 'pending'"),
    )
    op.create_index("ix_hipq_responses_status", "hipq_responses", ["status", "id"])
    op.create_index("ix_hipq_responses_expires", "hipq_responses", ["expires_at"])
    op.create_table(
        "hipq_parked_messages",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(300), nullable=False),
        sa.Column("partition", sa.Integer, nullable=True),
        sa.Column("offset", sa.BigInteger, nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=True),
        sa.Column("value", sa.Text, nullable=True),
        sa.Column("received_at", UTCDateTime, nullable=False),
    )
    op.create_index("ix_hipq_parked_received", "hipq_parked_messages", ["received_at"])


def downgrade() -> None:
    op.drop_table("hipq_parked_messages")
    op.drop_table("hipq_responses")
