"""responses know their copies and the attempt they settled

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

A response's fingerprint (the sender's delivery id, else its body) tells a copy of
a matched response from a new one under the same key; ``job_attempt`` records which
attempt a matched response settled. Upkeep's classification finds a key's finished
jobs through an index on the jobs' correlation keys.
"""

import sqlalchemy as sa

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

HAS_KEY = "correlation_key IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("hipq_responses") as table:
        table.add_column(sa.Column("fingerprint", sa.String(64), nullable=True))
        table.add_column(sa.Column("job_attempt", sa.Integer, nullable=True))
    op.create_index(
        "ix_hipq_responses_fingerprint", "hipq_responses", ["correlation_key", "fingerprint"]
    )
    op.create_index(
        "ix_hipq_jobs_correlation_key",
        "hipq_jobs",
        ["correlation_key"],
        postgresql_where=sa.text(HAS_KEY),
        sqlite_where=sa.text(HAS_KEY),
    )


def downgrade() -> None:
    op.drop_index("ix_hipq_jobs_correlation_key", "hipq_jobs")
    op.drop_index("ix_hipq_responses_fingerprint", "hipq_responses")
    with op.batch_alter_table("hipq_responses") as table:
        table.drop_column("job_attempt")
        table.drop_column("fingerprint")
