"""external checkpoints

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26

A heartbeat of an external job may carry a checkpoint (the payload its retries start
from): kept on the heartbeat's row until the queue's loop takes it into its tick.
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("hipq_job_heartbeats") as batch:
        batch.add_column(sa.Column("checkpoint", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hipq_job_heartbeats") as batch:
        batch.drop_column("checkpoint")
