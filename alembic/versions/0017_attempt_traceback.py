"""an attempt's traceback

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26

The traceback of the exception a python handler raised, bounded in size, kept on
its attempt (NULL for other transports and outcomes).
"""

import sqlalchemy as sa

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hipq_attempts") as batch:
        batch.add_column(sa.Column("traceback", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hipq_attempts") as batch:
        batch.drop_column("traceback")
