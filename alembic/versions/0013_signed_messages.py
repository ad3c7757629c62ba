"""signed callbacks and heartbeats taken once per job type

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26

A Standard Webhooks ``webhook-id`` is accepted once per job type, whatever
correlation key its URL names. Callbacks are looked up in the inbox by job type and
fingerprint (a new index: the old one leads with the key); heartbeats, which leave
no inbox row, claim their message in a new table that upkeep empties after twice
the signature tolerance.
"""

import sqlalchemy as sa

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_hipq_responses_type_fingerprint", "hipq_responses", ["job_type", "fingerprint"]
    )
    op.create_table(
        "hipq_heartbeat_messages",
        sa.Column("job_type", sa.String(200), primary_key=True),
        sa.Column("fingerprint", sa.String(64), primary_key=True),
        sa.Column("received_at", UTCDateTime, nullable=False),
    )
    op.create_index(
        "ix_hipq_heartbeat_messages_received", "hipq_heartbeat_messages", ["received_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_hipq_heartbeat_messages_received", "hipq_heartbeat_messages")
    op.drop_table("hipq_heartbeat_messages")
    op.drop_index("ix_hipq_responses_type_fingerprint", "hipq_responses")
