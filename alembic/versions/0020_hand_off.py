"""a hot queue's sends handed to other processes

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26

A queue's owner may hand claimed jobs to other live processes to send: the job's
``executor`` names the process (NULL: the owner itself), and ``hipq_reports`` holds
what executors' transports reported until the owner settles it. Nothing else is
rewritten.
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.add_column(sa.Column("executor", sa.String(200), nullable=True))
    op.create_table(
        "hipq_reports",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(200), nullable=False),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("body", JSON, nullable=True),
        sa.Column("deadline", UTCDateTime, nullable=True),
    )
    op.create_index("ix_hipq_reports_queue", "hipq_reports", ["queue", "id"])


def downgrade() -> None:
    op.drop_index("ix_hipq_reports_queue", "hipq_reports")
    op.drop_table("hipq_reports")
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.drop_column("executor")
