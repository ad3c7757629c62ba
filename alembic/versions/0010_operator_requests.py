"""operators' requests for in-flight jobs

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23

The cancel request of a job in flight becomes an operator's request of any kind
(cancel, complete with a result, fail with a reason, reschedule), which the queue's
loop applies at its next tick. ``cancel_requested`` stays the indexed flag that a
request waits; ``operator_request`` says which one (NULL: a cancel, as before).

Bulk operations (a verb on every job a filter matches) get a table that records
their progress. Jobs may carry flags, and a queue may forbid some of them at run time.
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.add_column(sa.Column("operator_request", JSON, nullable=True))
        batch.add_column(sa.Column("flags", JSON, nullable=True))
    with op.batch_alter_table("hipq_queues") as batch:
        batch.add_column(sa.Column("forbidden_flags", JSON, nullable=True))
    op.create_table(
        "hipq_bulk_operations",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("filter", JSON, nullable=False),
        sa.Column("params", JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("cursor", sa.BigInteger(), nullable=False),
        sa.Column("matched", sa.BigInteger(), nullable=False),
        sa.Column("changed", sa.BigInteger(), nullable=False),
        sa.Column("requested", sa.BigInteger(), nullable=False),
        sa.Column("skipped", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime, nullable=True),
    )
    op.create_index(
        "ix_hipq_bulk_operations_running",
        "hipq_bulk_operations",
        ["id"],
        postgresql_where=sa.text("state = 'running'"),
        sqlite_where=sa.text("state = 'running'"),
    )


def downgrade() -> None:
    op.drop_index("ix_hipq_bulk_operations_running", "hipq_bulk_operations")
    op.drop_table("hipq_bulk_operations")
    with op.batch_alter_table("hipq_queues") as batch:
        batch.drop_column("forbidden_flags")
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.drop_column("flags")
        batch.drop_column("operator_request")
