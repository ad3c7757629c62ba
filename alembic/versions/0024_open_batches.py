"""batches that jobs join by id, sealed to finish, and told of by their own notification

Revision ID: 0024
Revises: 0022
Create Date: 2026-11-26

A batch may be made open (``POST /v1/batches``) and jobs join it later by its id; it
finishes only once sealed (``sealed_at``) and none of its jobs is pending. A batch
POST's batch is made, joined and sealed in one transaction. A join locks the batch's
row with a guarded update (``finished_at IS NULL``), as the count trigger's update
does, so that a join and the last job's end are ordered by the row lock: either the
join counts first and the batch waits for its new jobs, or the batch finished first
and the join is refused.

What a batch does once, when it finishes, moves to a trigger on hipq_batches that
fires when ``finished_at`` is set (by the count trigger on hipq_jobs, or by the seal
when none is pending): it writes the counts into its completion job's payload and
releases it (the completion job now waits for the batch, ``waiting_for = 1``, not for
each job, since jobs may still join), and writes one outbox row per target of the
batch's ``notify`` (hipq_notifications gains ``batch_id``; such a row has no job).

Batches made before this revision are sealed (they were made whole), their completion
jobs wait for the batch instead of their jobs, and those with a completion job keep
their ``notify`` on that job (the batch's own is cleared), as they were made.
"""

from types import ModuleType

import sqlalchemy as sa

from alembic import context, op
from hipq.store.schema import UTCDateTime

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

BATCH_WHEN = "NEW.batch_id IS NOT NULL AND NEW.state IS NOT OLD.state"
# The batch finishes when sealed and none of its jobs is pending: set once.
FINISHED = """UPDATE hipq_batches SET finished_at = NEW.updated_at
  WHERE id = NEW.batch_id AND finished_at IS NULL AND sealed_at IS NOT NULL
    AND completed + failed + cancelled >= total"""


def _batch_counts(flag: str) -> str:
    """The UPDATE of NEW's batch's counts; ``flag``: SQL of a condition as 0 or 1."""
    moved = ",\n    ".join(
        "{0} = {0} + {1} - {2}".format(
            s, flag.format(f"NEW.state = '{s}'"), flag.format(f"OLD.state = '{s}'")
        )
        for s in ("completed", "failed", "cancelled")
    )
    return f"UPDATE hipq_batches SET\n    {moved}\n  WHERE id = NEW.batch_id"


def _counts(build: str) -> str:
    names = ("id", "total", "completed", "failed", "cancelled")
    fields = ", ".join(f"'{n}', NEW.{n}" for n in names)
    return f"{build}({fields})"


def _release(payload: str, later: str) -> str:
    """The completion job, counts in its payload, made due (it waited for the batch)."""
    return f"""UPDATE hipq_jobs SET payload = {payload},
    run_at = {later.format("after_run_at", "NEW.finished_at")},
    waiting_for = 0, waiting_reason = NULL, updated_at = NEW.finished_at
  WHERE id = NEW.completion_job_id AND state = 'scheduled' AND waiting_for > 0"""


COLUMNS = (
    "batch_id, target, job_state, attempt, result, finished_at,"
    " created_at, status, attempts, next_attempt_at"
)


def _notify(targets: str, counts: str) -> str:
    return f"""INSERT INTO hipq_notifications ({COLUMNS})
  SELECT NEW.id, t.value, 'finished', 0, {counts}, NEW.finished_at,
    NEW.finished_at, 'pending', 0, NEW.finished_at FROM {targets} AS t"""


FINISH_WHEN = "OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL"

SQLITE_COUNTS = f"""
CREATE TRIGGER hipq_jobs_batch_counts AFTER UPDATE OF state ON hipq_jobs FOR EACH ROW
WHEN {BATCH_WHEN}
BEGIN
  {_batch_counts("({0})")};
  {FINISHED};
END
"""

SQLITE_FINISHED = f"""
CREATE TRIGGER hipq_batches_finished AFTER UPDATE OF finished_at ON hipq_batches FOR EACH ROW
WHEN {FINISH_WHEN}
BEGIN
  {_release(f"json_set(payload, '$.batch', json({_counts('json_object')}))", "max({0}, {1})")};
  {_notify("json_each(NEW.notify)", f"json({_counts('json_object')})")}
    WHERE json_type(NEW.notify) = 'array';
END
"""

PG_COUNTS = f"""
CREATE OR REPLACE FUNCTION hipq_job_batch_counts() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  {_batch_counts("({0})::int")};
  {FINISHED};
  RETURN NULL;
END
$fn$
"""

PG_MERGED = f"payload || jsonb_build_object('batch', {_counts('jsonb_build_object')})"
PG_FINISHED = f"""
CREATE FUNCTION hipq_batch_finished() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE q text;
BEGIN
  FOR q IN WITH released AS (
    {_release(PG_MERGED, "GREATEST({0}, {1})")}
    RETURNING queue
  ) SELECT queue FROM released LOOP
    PERFORM pg_notify('hipq_jobs', q);
  END LOOP;
  IF jsonb_typeof(NEW.notify) = 'array' THEN
    {_notify("jsonb_array_elements_text(NEW.notify)", _counts("jsonb_build_object"))};
  END IF;
  RETURN NULL;
END
$fn$
"""

PG_FINISHED_TRIGGER = f"""
CREATE TRIGGER hipq_batches_finished AFTER UPDATE OF finished_at ON hipq_batches
FOR EACH ROW WHEN ({FINISH_WHEN}) EXECUTE FUNCTION hipq_batch_finished()
"""

# The completion jobs of batches not finished yet: they wait for the batch now.
WAIT_FOR_BATCH = """UPDATE hipq_jobs SET waiting_for = 1,
    waiting_reason = 'waits for batch ' || (SELECT b.id FROM hipq_batches b
      WHERE b.completion_job_id = hipq_jobs.id) || ' to finish'
  WHERE state = 'scheduled' AND waiting_for > 0
    AND id IN (SELECT completion_job_id FROM hipq_batches WHERE finished_at IS NULL)"""
FORGET_JOBS = """DELETE FROM hipq_job_dependencies WHERE outcome IS NULL
  AND job_id IN (SELECT completion_job_id FROM hipq_batches WHERE finished_at IS NULL)"""


def upgrade() -> None:
    with op.batch_alter_table("hipq_batches") as batch:
        batch.add_column(sa.Column("sealed_at", UTCDateTime, nullable=True))
    op.execute(sa.text("UPDATE hipq_batches SET sealed_at = created_at"))
    op.execute(sa.text("UPDATE hipq_batches SET notify = NULL WHERE completion_job_id IS NOT NULL"))
    op.execute(sa.text(WAIT_FOR_BATCH))
    op.execute(sa.text(FORGET_JOBS))
    # Jobs of one batch, for its page (and a join's count), newest first.
    op.create_index(
        "ix_hipq_jobs_batch",
        "hipq_jobs",
        ["batch_id", "id"],
        postgresql_where=sa.text("batch_id IS NOT NULL"),
        sqlite_where=sa.text("batch_id IS NOT NULL"),
    )
    # A batch's notification has no job: its own id, and no job type or queue.
    _notifications(nullable=True)
    op.create_index(
        "ix_hipq_notifications_batch",
        "hipq_notifications",
        ["batch_id", "id"],
        postgresql_where=sa.text("batch_id IS NOT NULL"),
        sqlite_where=sa.text("batch_id IS NOT NULL"),
    )
    if op.get_bind().dialect.name == "postgresql":
        for statement in (PG_COUNTS, PG_FINISHED, PG_FINISHED_TRIGGER):
            op.execute(sa.text(statement))
    else:
        op.execute(sa.text("DROP TRIGGER hipq_jobs_batch_counts"))
        op.execute(sa.text(SQLITE_COUNTS))
        op.execute(sa.text(SQLITE_FINISHED))


def _revision(name: str) -> ModuleType:
    """An earlier migration's module, for the statements it made (one copy of each)."""
    script = context.script.get_revision(name)
    assert script is not None and script.module is not None
    return script.module


def _notifications(nullable: bool) -> None:
    """hipq_notifications with ``batch_id`` (or without), its job's columns nullable (or
    not). SQLite copies the table to change a column: its partial index is made again,
    and the outbox trigger that names the table is dropped meanwhile (renaming the copy
    checks every trigger's statements)."""
    sqlite = op.get_bind().dialect.name == "sqlite"
    if sqlite:
        op.execute(sa.text("DROP TRIGGER hipq_jobs_outbox"))
    op.drop_index("ix_hipq_notifications_due", "hipq_notifications")
    with op.batch_alter_table("hipq_notifications") as batch:
        if nullable:
            batch.add_column(sa.Column("batch_id", sa.BigInteger(), nullable=True))
        else:
            batch.drop_column("batch_id")
        for name, kind in (
            ("job_id", sa.BigInteger()),
            ("job_type", sa.String(200)),
            ("queue", sa.String(200)),
        ):
            batch.alter_column(name, existing_type=kind, nullable=nullable)
    op.create_index(
        "ix_hipq_notifications_due",
        "hipq_notifications",
        ["next_attempt_at", "id"],
        postgresql_where=sa.text("status <> 'sent'"),
        sqlite_where=sa.text("status <> 'sent'"),
    )
    if sqlite:
        op.execute(sa.text(_revision("0012").SQLITE_TRIGGER))


def downgrade() -> None:
    """Back to 0022's triggers. A completion job that waits for its batch (made since)
    is not given back its dependency rows: it stays waiting; cancel or retry it."""
    earlier = _revision("0022")
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        op.execute(sa.text("DROP TRIGGER IF EXISTS hipq_batches_finished ON hipq_batches"))
        op.execute(sa.text("DROP FUNCTION IF EXISTS hipq_batch_finished()"))
    else:  # before the batches table is copied (renaming the copy checks every trigger)
        op.execute(sa.text("DROP TRIGGER IF EXISTS hipq_batches_finished"))
        op.execute(sa.text("DROP TRIGGER IF EXISTS hipq_jobs_batch_counts"))
    op.execute(sa.text("DELETE FROM hipq_notifications WHERE job_id IS NULL"))
    op.drop_index("ix_hipq_notifications_batch", "hipq_notifications")
    _notifications(nullable=False)
    op.drop_index("ix_hipq_jobs_batch", "hipq_jobs")
    with op.batch_alter_table("hipq_batches") as batch:
        batch.drop_column("sealed_at")
    if postgresql:
        op.execute(sa.text(earlier.PG_BATCH_FUNCTION.replace("CREATE ", "CREATE OR REPLACE ", 1)))
    else:
        op.execute(sa.text(earlier.SQLITE_BATCH_TRIGGER))
