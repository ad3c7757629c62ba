"""jobs that wait for jobs, and batches with a completion

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26

A job may name jobs it runs after (``after``). One row per (job, prerequisite) in
hipq_job_dependencies; the job stays ``scheduled`` with ``waiting_for`` (how many
prerequisites have not finished) and its run_at parked at ``AFTER_PARKED`` (the due
scan never reaches it), its own run_at kept in ``after_run_at``.

A trigger on hipq_jobs settles the dependents of every job that reaches a terminal
state, in the transaction that made the change (every path: the loop's settle, an
operator's verb, a bulk operation), so that any number of processes agree: a
completed prerequisite (or any, with ``after_failed = 'run'``) counts down
``waiting_for`` and at zero makes the job due (run_at back to its own, or now); a
failed or cancelled one cancels the job (``after_failed = 'cancel'``), which cancels
its own dependents in turn. The dependency row keeps the prerequisite's outcome,
so that a prerequisite retried and finished again counts once. The trigger fires only for a
job marked ``has_dependents`` (set when a job names it), so that the many jobs no
job waits for pay nothing at settle. On PostgreSQL the
trigger sends the released job's queue on the wake-up channel; SQLite's one process
finds it at its next tick.

A batch (hipq_batches) counts its jobs' outcomes: a second trigger moves a job's
count from its old state to its new one (a retried job counts once), and when none
is pending it marks the batch finished, once, and writes the counts into the
payload of the batch's completion job, which is a job that runs after every job of
the batch (``after_failed = 'run'``) and so is released by the first trigger.
"""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op
from hipq.store.schema import UTCDateTime

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

TERMINAL = "('completed', 'failed', 'cancelled')"
# The dependents of NEW still waiting on it.
WAITING = (
    "id IN (SELECT job_id FROM hipq_job_dependencies WHERE after_id = NEW.id"
    " AND outcome IS NULL) AND state = 'scheduled' AND waiting_for > 0"
)
RELEASES = "(NEW.state = 'completed' OR after_failed = 'run')"
CANCELS = "NEW.state <> 'completed' AND after_failed = 'cancel'"


def _count_down(later: str) -> str:
    """The UPDATE that counts a waiting dependent down; ``later``: the SQL of the
    greater of two instants."""
    return f"""UPDATE hipq_jobs SET
    run_at = CASE WHEN waiting_for = 1
      THEN {later.format("after_run_at", "NEW.updated_at")} ELSE run_at END,
    waiting_reason = CASE WHEN waiting_for = 1 THEN NULL ELSE waiting_reason END,
    waiting_for = waiting_for - 1,
    updated_at = NEW.updated_at
  WHERE {WAITING} AND {RELEASES}"""


CANCEL = f"""UPDATE hipq_jobs SET
    state = 'cancelled', waiting_for = 0, waiting_reason = NULL, run_at = after_run_at,
    last_error = 'job ' || NEW.id || ' it runs after was ' || NEW.state,
    finished_at = NEW.updated_at, updated_at = NEW.updated_at
  WHERE {WAITING} AND {CANCELS}"""

MARK = """UPDATE hipq_job_dependencies SET outcome = NEW.state
  WHERE after_id = NEW.id AND outcome IS NULL"""

SQLITE_TRIGGER = f"""
CREATE TRIGGER hipq_jobs_dependents AFTER UPDATE OF state ON hipq_jobs FOR EACH ROW
WHEN NEW.has_dependents AND NEW.state IN {TERMINAL} AND NEW.state IS NOT OLD.state
BEGIN
  {_count_down("max({0}, {1})")};
  {CANCEL};
  {MARK};
END
"""

PG_FUNCTION = f"""
CREATE FUNCTION hipq_job_dependents() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE q text;
BEGIN
  FOR q IN WITH released AS (
    {_count_down("GREATEST({0}, {1})")}
    RETURNING queue, waiting_for
  ) SELECT DISTINCT queue FROM released WHERE waiting_for = 0 LOOP
    PERFORM pg_notify('hipq_jobs', q);
  END LOOP;
  {CANCEL};
  {MARK};
  RETURN NULL;
END
$fn$
"""

PG_TRIGGER = f"""
CREATE TRIGGER hipq_jobs_dependents AFTER UPDATE OF state ON hipq_jobs FOR EACH ROW
WHEN (NEW.has_dependents AND NEW.state IN {TERMINAL} AND OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION hipq_job_dependents()
"""


BATCH_WHEN = "NEW.batch_id IS NOT NULL AND NEW.state IS NOT OLD.state"


def _batch_counts(flag: str) -> str:
    """The UPDATE of NEW's batch's counts; ``flag``: SQL of a condition as 0 or 1."""
    moved = ",\n    ".join(
        "{0} = {0} + {1} - {2}".format(
            s, flag.format(f"NEW.state = '{s}'"), flag.format(f"OLD.state = '{s}'")
        )
        for s in ("completed", "failed", "cancelled")
    )
    return f"UPDATE hipq_batches SET\n    {moved}\n  WHERE id = NEW.batch_id"


BATCH_FINISHED = """UPDATE hipq_batches SET finished_at = NEW.updated_at
  WHERE id = NEW.batch_id AND finished_at IS NULL AND completed + failed + cancelled >= total"""


def _completion_payload(merged: str) -> str:
    """The counts into the waiting completion job's payload once none is pending."""
    return f"""UPDATE hipq_jobs SET payload = {merged}
  WHERE state = 'scheduled' AND id = (SELECT completion_job_id FROM hipq_batches b
    WHERE b.id = NEW.batch_id AND b.completed + b.failed + b.cancelled >= b.total)"""


def _counts(build: str) -> str:
    fields = ", ".join(f"'{n}', b.{n}" for n in ("id", "total", "completed", "failed", "cancelled"))
    return f"(SELECT {build}({fields}) FROM hipq_batches b WHERE b.id = NEW.batch_id)"


SQLITE_BATCH_TRIGGER = f"""
CREATE TRIGGER hipq_jobs_batch_counts AFTER UPDATE OF state ON hipq_jobs FOR EACH ROW
WHEN {BATCH_WHEN}
BEGIN
  {_batch_counts("({0})")};
  {BATCH_FINISHED};
  {_completion_payload(f"json_set(payload, '$.batch', json({_counts('json_object')}))")};
END
"""

PG_BATCH_FUNCTION = f"""
CREATE FUNCTION hipq_job_batch_counts() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  {_batch_counts("({0})::int")};
  {BATCH_FINISHED};
  {_completion_payload(f"payload || jsonb_build_object('batch', {_counts('jsonb_build_object')})")};
  RETURN NULL;
END
$fn$
"""

PG_BATCH_TRIGGER = f"""
CREATE TRIGGER hipq_jobs_batch_counts AFTER UPDATE OF state ON hipq_jobs FOR EACH ROW
WHEN ({BATCH_WHEN.replace("IS NOT OLD", "IS DISTINCT FROM OLD")})
EXECUTE FUNCTION hipq_job_batch_counts()
"""


def upgrade() -> None:
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.add_column(sa.Column("after", JSON, nullable=True))
        batch.add_column(sa.Column("after_failed", sa.String(8), nullable=True))
        batch.add_column(sa.Column("waiting_for", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("after_run_at", UTCDateTime, nullable=True))
        batch.add_column(sa.Column("batch_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("has_dependents", sa.Boolean(), nullable=True))
    op.create_table(
        "hipq_batches",
        sa.Column("id", ID, primary_key=True, autoincrement=True),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("completed", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("cancelled", sa.Integer(), nullable=False),
        sa.Column("on_complete", sa.String(200), nullable=True),
        sa.Column("completion_job_id", sa.BigInteger(), nullable=True),
        sa.Column("notify", JSON, nullable=True),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime, nullable=True),
    )
    op.create_table(
        "hipq_job_dependencies",
        sa.Column(
            "job_id", ID, sa.ForeignKey("hipq_jobs.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("after_id", sa.BigInteger(), primary_key=True),
        sa.Column("outcome", sa.String(16), nullable=True),
    )
    op.create_index(
        "ix_hipq_job_dependencies_after", "hipq_job_dependencies", ["after_id", "job_id"]
    )
    if op.get_bind().dialect.name == "postgresql":
        for statement in (PG_FUNCTION, PG_TRIGGER, PG_BATCH_FUNCTION, PG_BATCH_TRIGGER):
            op.execute(sa.text(statement))
    else:
        op.execute(sa.text(SQLITE_TRIGGER))
        op.execute(sa.text(SQLITE_BATCH_TRIGGER))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in ("dependents", "batch_counts"):
            op.execute(sa.text(f"DROP TRIGGER IF EXISTS hipq_jobs_{name} ON hipq_jobs"))
        op.execute(sa.text("DROP FUNCTION IF EXISTS hipq_job_dependents()"))
        op.execute(sa.text("DROP FUNCTION IF EXISTS hipq_job_batch_counts()"))
    else:
        op.execute(sa.text("DROP TRIGGER IF EXISTS hipq_jobs_dependents"))
        op.execute(sa.text("DROP TRIGGER IF EXISTS hipq_jobs_batch_counts"))
    op.drop_table("hipq_batches")
    op.drop_index("ix_hipq_job_dependencies_after", "hipq_job_dependencies")
    op.drop_table("hipq_job_dependencies")
    with op.batch_alter_table("hipq_jobs") as batch:
        for name in (
            "has_dependents",
            "batch_id",
            "after_run_at",
            "waiting_for",
            "after_failed",
            "after",
        ):
            batch.drop_column(name)
