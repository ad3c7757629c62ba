"""queue stats for operators; start history lookup for rate limits

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("hipq_queues") as batch:
        batch.add_column(sa.Column("stats", JSON, nullable=True))
    # Rate limits rebuild their start history from finished attempts after a takeover.
    op.create_index("ix_hipq_attempts_started", "hipq_attempts", ["started_at"])


def downgrade() -> None:
    op.drop_index("ix_hipq_attempts_started", "hipq_attempts")
    with op.batch_alter_table("hipq_queues") as batch:
        batch.drop_column("stats")
