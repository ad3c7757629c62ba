"""limits changed at run time

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-26

An operator's overrides of a queue's configured limits (concurrency, a share's
percentages, a per_key limit, a rate), with who changed them last and when. The
queue's owner reads them with its lease and rebuilds its chain.
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("hipq_queues") as batch:
        batch.add_column(sa.Column("limits", JSON, nullable=True))
        batch.add_column(sa.Column("limits_changed_at", UTCDateTime, nullable=True))
        batch.add_column(sa.Column("limits_changed_by", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hipq_queues") as batch:
        batch.drop_column("limits_changed_by")
        batch.drop_column("limits_changed_at")
        batch.drop_column("limits")
