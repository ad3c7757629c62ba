"""hipq_pull_claims.reported: the one outcome a pull claim took

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-29

A worker's outcome (complete, fail, snooze) for a claim is taken once: the report
sets ``reported`` (the fingerprint of what it said) in the same transaction that
stores it in the inbox, guarded by ``reported IS NULL``. The same report sent again
(a lost answer) is accepted again without a second row; another outcome for the
same claim is refused at once, on both engines, instead of being stored and dropped
at the owner's tick.
"""

import sqlalchemy as sa

from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hipq_pull_claims") as table:
        table.add_column(sa.Column("reported", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hipq_pull_claims") as table:
        table.drop_column("reported")
