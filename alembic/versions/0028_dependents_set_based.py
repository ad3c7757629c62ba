"""a job's end cancels every job that depends on it in two statements, at any depth

Revision ID: 0028
Revises: 0025
Create Date: 2026-11-29

Until now the trigger that settles a job's dependents (0022) cancelled the direct ones,
whose own trigger then cancelled theirs: one level of trigger recursion per level of
the graph. PostgreSQL stopped at about 850 levels (``stack depth limit exceeded``) and
SQLite at 1,000 (``too many levels of trigger recursion``), and the statement that
ended the job failed with them, every time: an operator's cancel, or the settle of a
queue's whole tick.

Now the job whose end starts it (the root) cancels the whole set at once. A recursive
query finds every job that would be cancelled (those that wait for the root, or for
one of those, with ``after_failed = 'cancel'``); one update marks them
(``waiting_for = -1``) with the reason each is cancelled (the prerequisite it runs
after that ended first: the root, or a job of the set), and a second update cancels
the marked ones. Their own triggers still fire, one level deep: each counts down its
``after_failed = 'run'`` dependents and records its outcome on its dependency rows,
but a job cancelled by a root (its old ``waiting_for`` is the mark) cancels nothing
itself, since the root's set holds all of it. The counts of batches and the
completion jobs they release move with each row, as before.

Also an index of the batches not finished by their completion job: the walk that
refuses a cycle among waits (``hipq.store.dependencies``) follows a completion job
to its batch's jobs.
"""

import sqlalchemy as sa

from alembic import context, op

revision = "0028"
down_revision = "0025"
branch_labels = None
depends_on = None

# The root: a job that ended (not completed) and was not cancelled by another's set.
IS_ROOT = "NEW.state <> 'completed' AND coalesce(OLD.waiting_for, 0) >= 0"
# A dependency whose waiting job the end of its prerequisite cancels.
CANCELLED_BY = (
    "d.outcome IS NULL AND j.state = 'scheduled' AND j.waiting_for > 0"
    " AND j.after_failed = 'cancel'"
)
DOOMED = f"""WITH RECURSIVE doomed(id) AS (
    SELECT d.job_id FROM hipq_job_dependencies d JOIN hipq_jobs j ON j.id = d.job_id
      WHERE d.after_id = NEW.id AND {IS_ROOT} AND {CANCELLED_BY}
    UNION
    SELECT d.job_id FROM doomed x JOIN hipq_job_dependencies d ON d.after_id = x.id
      JOIN hipq_jobs j ON j.id = d.job_id WHERE {CANCELLED_BY}
  )"""
# Each of the set, and the first of its prerequisites that ended: the root or one of
# the set (the same answer on both engines, whatever order the rows are updated in).
CAUSES = f"""{DOOMED}
  SELECT x.id, (SELECT min(d.after_id) FROM hipq_job_dependencies d
    WHERE d.job_id = x.id AND d.outcome IS NULL
      AND (d.after_id = NEW.id OR d.after_id IN (SELECT id FROM doomed))) AS cause
  FROM doomed x"""
MARK_DOOMED = f"""UPDATE hipq_jobs SET waiting_for = -1,
    last_error = 'job ' || c.cause || ' it runs after was '
      || CASE WHEN c.cause = NEW.id THEN NEW.state ELSE 'cancelled' END
  FROM ({CAUSES}) AS c
  WHERE hipq_jobs.id = c.id"""
CANCEL_MARKED = f"""UPDATE hipq_jobs SET
    state = 'cancelled', waiting_for = 0, waiting_reason = NULL, run_at = after_run_at,
    finished_at = NEW.updated_at, updated_at = NEW.updated_at
  WHERE waiting_for = -1 AND {IS_ROOT} AND id IN (WITH RECURSIVE marked(id) AS (
    SELECT d.job_id FROM hipq_job_dependencies d JOIN hipq_jobs j ON j.id = d.job_id
      WHERE d.after_id = NEW.id AND j.waiting_for = -1
    UNION
    SELECT d.job_id FROM marked x JOIN hipq_job_dependencies d ON d.after_id = x.id
      JOIN hipq_jobs j ON j.id = d.job_id WHERE j.waiting_for = -1
  ) SELECT id FROM marked)"""

# The dependents of NEW still waiting on it, counted down (0022's, unchanged).
WAITING = (
    "id IN (SELECT job_id FROM hipq_job_dependencies WHERE after_id = NEW.id"
    " AND outcome IS NULL) AND state = 'scheduled' AND waiting_for > 0"
)
RELEASES = "(NEW.state = 'completed' OR after_failed = 'run')"


def _count_down(later: str) -> str:
    return f"""UPDATE hipq_jobs SET
    run_at = CASE WHEN waiting_for = 1
      THEN {later.format("after_run_at", "NEW.updated_at")} ELSE run_at END,
    waiting_reason = CASE WHEN waiting_for = 1 THEN NULL ELSE waiting_reason END,
    waiting_for = waiting_for - 1,
    updated_at = NEW.updated_at
  WHERE {WAITING} AND {RELEASES}"""


MARK = """UPDATE hipq_job_dependencies SET outcome = NEW.state
  WHERE after_id = NEW.id AND outcome IS NULL"""

WHEN_SQLITE = (
    "NEW.has_dependents AND NEW.state IN ('completed', 'failed', 'cancelled')"
    " AND NEW.state IS NOT OLD.state"
)

SQLITE_TRIGGER = f"""
CREATE TRIGGER hipq_jobs_dependents AFTER UPDATE OF state ON hipq_jobs FOR EACH ROW
WHEN {WHEN_SQLITE}
BEGIN
  {_count_down("max({0}, {1})")};
  {MARK_DOOMED};
  {CANCEL_MARKED};
  {MARK};
END
"""

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION hipq_job_dependents() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE q text;
BEGIN
  FOR q IN WITH released AS (
    {_count_down("GREATEST({0}, {1})")}
    RETURNING queue, waiting_for
  ) SELECT DISTINCT queue FROM released WHERE waiting_for = 0 LOOP
    PERFORM pg_notify('hipq_jobs', q);
  END LOOP;
  IF {IS_ROOT} THEN
    {MARK_DOOMED};
    {CANCEL_MARKED};
  END IF;
  {MARK};
  RETURN NULL;
END
$fn$
"""


def upgrade() -> None:
    op.create_index(
        "ix_hipq_batches_completion",
        "hipq_batches",
        ["completion_job_id"],
        postgresql_where=sa.text("finished_at IS NULL"),
        sqlite_where=sa.text("finished_at IS NULL"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(PG_FUNCTION))
    else:
        op.execute(sa.text("DROP TRIGGER hipq_jobs_dependents"))
        op.execute(sa.text(SQLITE_TRIGGER))


def downgrade() -> None:
    """Back to 0022's recursive trigger."""
    script = context.script.get_revision("0022")
    assert script is not None and script.module is not None
    earlier = script.module
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(earlier.PG_FUNCTION.replace("CREATE ", "CREATE OR REPLACE ", 1)))
    else:
        op.execute(sa.text("DROP TRIGGER hipq_jobs_dependents"))
        op.execute(sa.text(earlier.SQLITE_TRIGGER))
    op.drop_index("ix_hipq_batches_completion", "hipq_batches")
