"""a schedule that pauses when its job fails for good

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26

``pause_on_failure``: the scheduler pauses the schedule when the job of its latest
fire time ends failed; ``paused_reason`` says why (NULL when an operator paused it,
cleared on resume).
"""

import sqlalchemy as sa

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hipq_schedules") as batch:
        batch.add_column(
            sa.Column("pause_on_failure", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("paused_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hipq_schedules") as batch:
        batch.drop_column("paused_reason")
        batch.drop_column("pause_on_failure")
