"""each process's hipq version in the registry

Revision ID: 0031
Revises: 0029
Create Date: 2026-11-29

``hipq_processes.version``: the hipq version a process runs, written with its
heartbeat, so that the processes page and ``GET /v1/processes`` show a rolling
upgrade's mix of versions. NULL for a row written by a process older than this.
"""

import sqlalchemy as sa

from alembic import op

revision = "0031"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hipq_processes") as batch:
        batch.add_column(sa.Column("version", sa.String(50), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hipq_processes") as batch:
        batch.drop_column("version")
