"""pull workers' claims

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26

Which pull worker took a job's claim (its attempt and claim time), and the digest
of the attempt token its reports must carry. A new table: nothing else is rewritten.
"""

import sqlalchemy as sa

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "hipq_pull_claims",
        sa.Column(
            "job_id",
            Id,
            sa.ForeignKey("hipq_jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("claimed_at", UTCDateTime, nullable=False),
        sa.Column("token_digest", sa.String(64), nullable=False),
        sa.Column("worker", sa.String(200), nullable=False),
        sa.Column("fetched_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hipq_pull_claims")
