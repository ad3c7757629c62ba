"""operators' requests for in-flight jobs

Revision ID: 0008
Revises: 0006
Create Date: 2026-11-23

The cancel request of a job in flight becomes an operator's request of any kind
(cancel, complete with a result, fail with a reason, reschedule), which the queue's
loop applies at its next tick. ``cancel_requested`` stays the indexed flag that a
request waits; ``operator_request`` says which one (NULL: a cancel, as before).
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op

revision = "0008"
down_revision = "0006"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.add_column(sa.Column("operator_request", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.drop_column("operator_request")
