"""recurring jobs: schedules and the claim of each fire time

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23

``hipq_schedules`` holds every schedule (from the config or the API) with how far
its fire times have been decided; ``hipq_schedule_fires`` holds one row per decided
fire time, whose primary key (schedule, fire_time) lets only one process create
that fire time's job.
"""

import sqlalchemy as sa

from alembic import op
from hipq.store.schema import Id, Json, UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hipq_schedules",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("cron", sa.String(200), nullable=False),
        sa.Column("timezone", sa.String(100), nullable=False),
        sa.Column("job", Json, nullable=False),
        sa.Column("catch_up", sa.String(16), nullable=False),
        sa.Column("backfill_seconds", sa.Float, nullable=False),
        sa.Column("overlap", sa.String(16), nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("checked_until", UTCDateTime, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
    )
    op.create_table(
        "hipq_schedule_fires",
        sa.Column("schedule", sa.String(200), primary_key=True),
        sa.Column("fire_time", UTCDateTime, primary_key=True),
        sa.Column("job_id", Id, nullable=True),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hipq_schedule_fires")
    op.drop_table("hipq_schedules")
