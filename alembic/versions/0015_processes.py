"""a registry of live processes

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26

Each ``hipq serve`` process writes a row here with its heartbeat and the queues it
may serve; every process reads them to take its fair share of the queues and hand
back the leases beyond it. A new table: nothing else is rewritten.
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "hipq_processes",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("heartbeat_at", UTCDateTime, nullable=False),
        sa.Column("queues", JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hipq_processes")
