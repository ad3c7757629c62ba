"""the enqueue's trace context on each job

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23

With OpenTelemetry on (the hipq[otel] extra), the span that enqueued a job is kept
as its W3C traceparent, so that every attempt's span, perhaps days later and in
another process, links back to it. NULL when tracing is off. Additive: a nullable
column, no rewrite of the table on either engine.
"""

import sqlalchemy as sa

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("hipq_jobs", sa.Column("trace_context", sa.String(128), nullable=True))


def downgrade() -> None:
    op.drop_column("hipq_jobs", "trace_context")
