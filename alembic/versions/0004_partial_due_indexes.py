"""due-scan indexes cover scheduled jobs only

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21

The loop's due scan only ever reads scheduled jobs. Partial indexes stay the size of
the backlog instead of the whole history, and claiming or settling a job no longer
inserts index entries that nothing reads.
"""

import sqlalchemy as sa

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SCHEDULED = "state = 'scheduled'"


def _partial() -> dict:
    return {"postgresql_where": sa.text(SCHEDULED), "sqlite_where": sa.text(SCHEDULED)}


def upgrade() -> None:
    op.drop_index("ix_hipq_jobs_due_time", "hipq_jobs")
    op.drop_index("ix_hipq_jobs_due_priority", "hipq_jobs")
    op.create_index(
        "ix_hipq_jobs_due_time", "hipq_jobs", ["queue", "run_at", "priority", "id"], **_partial()
    )
    op.create_index(
        "ix_hipq_jobs_due_priority",
        "hipq_jobs",
        ["queue", "priority", "run_at", "id"],
        **_partial(),
    )


def downgrade() -> None:
    op.drop_index("ix_hipq_jobs_due_time", "hipq_jobs")
    op.drop_index("ix_hipq_jobs_due_priority", "hipq_jobs")
    op.create_index(
        "ix_hipq_jobs_due_time", "hipq_jobs", ["queue", "state", "run_at", "priority", "id"]
    )
    op.create_index(
        "ix_hipq_jobs_due_priority", "hipq_jobs", ["queue", "state", "priority", "run_at", "id"]
    )
