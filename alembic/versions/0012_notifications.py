"""outcome notifications through an outbox

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23

Jobs may name notification targets (``notify``). A trigger on hipq_jobs writes one
outbox row per target when such a job reaches a terminal state, in the transaction
that made the change: every path to a terminal state (the loop's settle, a late
response accepted, an operator's verb on one job or in bulk) is covered at the one
place they all pass, and a change that rolls back takes its row with it.

On PostgreSQL the trigger also sends ``settled:<queue>`` on the wake-up channel for
every job that reaches a terminal state (NOTIFY is delivered at commit and folded to
one per queue and transaction), which wakes ``GET /v1/jobs/{id}?wait=`` in every
process.
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

TERMINAL = "('completed', 'failed', 'cancelled')"
COLUMNS = (
    "job_id, target, job_type, queue, job_state, attempt, result, error, finished_at,"
    " created_at, status, attempts, next_attempt_at"
)
VALUES = (
    "NEW.id, t.value, NEW.type, NEW.queue, NEW.state, NEW.attempt, NEW.result,"
    " NEW.last_error, NEW.finished_at, NEW.updated_at, 'pending', 0, NEW.updated_at"
)

SQLITE_TRIGGER = f"""
CREATE TRIGGER hipq_jobs_outbox AFTER UPDATE OF state ON hipq_jobs FOR EACH ROW
WHEN json_type(NEW.notify) = 'array' AND NEW.state IN {TERMINAL} AND NEW.state IS NOT OLD.state
BEGIN
  INSERT INTO hipq_notifications ({COLUMNS})
  SELECT {VALUES} FROM json_each(NEW.notify) AS t;
END
"""

PG_FUNCTION = f"""
CREATE FUNCTION hipq_job_finished() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_notify('hipq_jobs', 'settled:' || NEW.queue);
  IF jsonb_typeof(NEW.notify) = 'array' THEN
    INSERT INTO hipq_notifications ({COLUMNS})
    SELECT {VALUES} FROM jsonb_array_elements_text(NEW.notify) AS t(value);
  END IF;
  RETURN NULL;
END
$fn$
"""

PG_TRIGGER = f"""
CREATE TRIGGER hipq_jobs_finished AFTER UPDATE OF state ON hipq_jobs FOR EACH ROW
WHEN (NEW.state IN {TERMINAL} AND OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION hipq_job_finished()
"""


def upgrade() -> None:
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.add_column(sa.Column("notify", JSON, nullable=True))
    op.create_table(
        "hipq_notifications",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("target", sa.String(200), nullable=False),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("queue", sa.String(200), nullable=False),
        sa.Column("job_state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("result", JSON, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("finished_at", UTCDateTime, nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime, nullable=False),
        sa.Column("locked_until", UTCDateTime, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("sent_at", UTCDateTime, nullable=True),
    )
    op.create_index(
        "ix_hipq_notifications_due",
        "hipq_notifications",
        ["next_attempt_at", "id"],
        postgresql_where=sa.text("status <> 'sent'"),
        sqlite_where=sa.text("status <> 'sent'"),
    )
    op.create_index("ix_hipq_notifications_job", "hipq_notifications", ["job_id", "id"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(PG_FUNCTION))
        op.execute(sa.text(PG_TRIGGER))
    else:
        op.execute(sa.text(SQLITE_TRIGGER))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text("DROP TRIGGER IF EXISTS hipq_jobs_finished ON hipq_jobs"))
        op.execute(sa.text("DROP FUNCTION IF EXISTS hipq_job_finished()"))
    else:
        op.execute(sa.text("DROP TRIGGER IF EXISTS hipq_jobs_outbox"))
    op.drop_index("ix_hipq_notifications_job", "hipq_notifications")
    op.drop_index("ix_hipq_notifications_due", "hipq_notifications")
    op.drop_table("hipq_notifications")
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.drop_column("notify")
