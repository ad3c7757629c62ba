"""a batch's owner: the tenant whose token made it

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-29

``owner``: the name of the restricted token that made the batch (a tenant), NULL for
one made by an unrestricted token, the service or before this revision. A tenant's
lookups of a batch by its id (join, seal) see only its own batches, so another
tenant's batch answers as one that does not exist (docs/security.md).

A plain ``ALTER TABLE``: on SQLite, recreating the table would drop the trigger that
finishes a batch (0024).
"""

import sqlalchemy as sa

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hipq_batches", sa.Column("owner", sa.String(200), nullable=True))


def downgrade() -> None:
    op.drop_column("hipq_batches", "owner")
