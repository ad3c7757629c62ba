"""one attempt row per job, attempt and outcome

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23

A tick whose COMMIT's reply was lost was settled again and inserted its attempt
rows twice. The attempt rows are now unique per (job, attempt, outcome) and the
inserts skip a row that exists. The outcome is part of the key because a late
success accepted for a failed attempt is recorded next to that attempt's failure.
Copies already stored are removed (the oldest row of each is kept).
"""

import sqlalchemy as sa

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        sa.text(
            "DELETE FROM hipq_attempts WHERE id NOT IN ("
            " SELECT min(id) FROM hipq_attempts GROUP BY job_id, attempt, outcome)"
        )
    )
    op.drop_index("ix_hipq_attempts_job", "hipq_attempts")
    op.create_index(
        "ux_hipq_attempts_job_attempt",
        "hipq_attempts",
        ["job_id", "attempt", "outcome"],
        unique=True,
    )


def downgrade() -> None:
    op.drop_index("ux_hipq_attempts_job_attempt", "hipq_attempts")
    op.create_index("ix_hipq_attempts_job", "hipq_attempts", ["job_id", "attempt"])
