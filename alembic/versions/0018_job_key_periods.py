"""uniqueness of a job_key over a period

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26

``unique_for`` returns the first job of a key created within the period, whatever
its state: an index finds a key's jobs by creation time (the open-key index holds
open jobs only).
"""

import sqlalchemy as sa

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_hipq_jobs_job_key_created",
        "hipq_jobs",
        ["job_key", "created_at"],
        postgresql_where=sa.text("job_key IS NOT NULL"),
        sqlite_where=sa.text("job_key IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_hipq_jobs_job_key_created", table_name="hipq_jobs")
