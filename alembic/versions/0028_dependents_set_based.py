"""a job's end cancels every job that depends on it in two statements, at any depth

Revision ID: 0028
Revises: 0027
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
down_revision = "0027"
branch_labels = None
depends_on = None

# The root: a job that ended (not completed) and was not cancelled by another's set
# (SQLite marks that set with ``waiting_for = -1`` first).
IS_ROOT = "NEW.state <> 'completed' AND coalesce(OLD.waiting_for, 0) >= 0"
# A dependency whose waiting job the end of its prerequisite cancels.
CANCELLED_BY = (
    "d.outcome IS NULL AND j.state = 'scheduled' AND j.waiting_for > 0"
    " AND j.after_failed = 'cancel'"
)
# One step of a walk from the jobs in ``{walk}`` to those that wait for them and pass
# ``{test}`` (on the waiting job ``j``). SQLite's planner follows the indexes as written.
# PostgreSQL plans a recursive step once, without knowing how few rows each round
# has: joined plainly it may scan the tables in every round (a chain of n jobs: n
# scans). There each job's dependents are read by a subquery per job of the round (a
# LATERAL one, kept apart by OFFSET 0) and the waiting job by its id.
SQLITE_STEP = """SELECT d.job_id FROM {walk} x JOIN hipq_job_dependencies d ON d.after_id = x.id
      JOIN hipq_jobs j ON j.id = d.job_id WHERE {test}"""
PG_STEP = """SELECT d.job_id FROM {walk} x CROSS JOIN LATERAL (
      SELECT d.job_id, d.outcome FROM hipq_job_dependencies d WHERE d.after_id = x.id OFFSET 0
    ) AS d WHERE EXISTS (SELECT 1 FROM hipq_jobs j WHERE j.id = d.job_id AND {test} OFFSET 0)"""


def _doomed(step: str) -> str:
    """The jobs the end of NEW cancels, at any depth, as the CTE ``doomed``."""
    return f"""WITH RECURSIVE doomed(id) AS (
    {step.format(walk="(SELECT NEW.id AS id)", test=f"{IS_ROOT} AND {CANCELLED_BY}")}
    UNION
    {step.format(walk="doomed", test=CANCELLED_BY)}
  )"""


def _reason(cause: str) -> str:
    """Why a job is cancelled: ``cause``, its first prerequisite that ended (the root or
    one of the set), whatever order the rows are updated in."""
    return f"""'job ' || {cause} || ' it runs after was '
      || CASE WHEN {cause} = NEW.id THEN NEW.state ELSE 'cancelled' END"""


def _first_ended(job: str, in_set: str) -> str:
    return f"""(SELECT min(d.after_id) FROM hipq_job_dependencies d
    WHERE d.job_id = {job} AND d.outcome IS NULL AND (d.after_id = NEW.id OR d.after_id {in_set}))"""


# SQLite fires a row's trigger as soon as the row is updated, before the statement's
# next row: cancelled plainly, each job of the set would cancel the rest of it again,
# one level deeper. So the set is marked first (no state changes, no trigger fires),
# then its marked rows are cancelled, whose triggers see the mark and leave the rest.
SQLITE_MARK_DOOMED = f"""UPDATE hipq_jobs SET waiting_for = -1, last_error = {_reason("c.cause")}
  FROM ({_doomed(SQLITE_STEP)}
  SELECT x.id, {_first_ended("x.id", "IN (SELECT id FROM doomed)")} AS cause FROM doomed x) AS c
  WHERE hipq_jobs.id = c.id"""
SQLITE_CANCEL_MARKED = f"""UPDATE hipq_jobs SET
    state = 'cancelled', waiting_for = 0, waiting_reason = NULL, run_at = after_run_at,
    finished_at = NEW.updated_at, updated_at = NEW.updated_at
  WHERE waiting_for = -1 AND {IS_ROOT} AND id IN (WITH RECURSIVE marked(id) AS (
    SELECT d.job_id FROM hipq_job_dependencies d JOIN hipq_jobs j ON j.id = d.job_id
      WHERE d.after_id = NEW.id AND j.waiting_for = -1
    UNION
    {SQLITE_STEP.format(walk="marked", test="j.waiting_for = -1")}
  ) SELECT id FROM marked)"""

# PostgreSQL fires the rows' triggers once the statement is done: the set is cancelled
# by one update, after which each job's trigger finds none of it still waiting. The
# set is held in an array, read by the primary key.
PG_CANCEL_DOOMED = f"""doomed := ARRAY({_doomed(PG_STEP)} SELECT id FROM doomed);
    IF cardinality(doomed) > 0 THEN
      UPDATE hipq_jobs SET
        state = 'cancelled', waiting_for = 0, waiting_reason = NULL, run_at = after_run_at,
        finished_at = NEW.updated_at, updated_at = NEW.updated_at,
        last_error = (SELECT {_reason("c.cause")} FROM (SELECT
          {_first_ended("hipq_jobs.id", "IN (SELECT unnest(doomed))")} AS cause) AS c)
      WHERE id = ANY(doomed) AND state = 'scheduled';
    END IF"""

# The dependents of NEW still waiting on it (PostgreSQL reads their ids first: joined,
# its planner may scan every scheduled job instead).
WAITING = (
    "id IN (SELECT job_id FROM hipq_job_dependencies WHERE after_id = NEW.id"
    " AND outcome IS NULL) AND state = 'scheduled' AND waiting_for > 0"
)
PG_WAITING = (
    "id = ANY(ARRAY(SELECT job_id FROM hipq_job_dependencies WHERE after_id = NEW.id"
    " AND outcome IS NULL)) AND state = 'scheduled' AND waiting_for > 0"
)
RELEASES = "(NEW.state = 'completed' OR after_failed = 'run')"


def _count_down(later: str, waiting: str) -> str:
    """0022's count down of NEW's waiting dependents (``waiting``) that its end releases."""
    return f"""UPDATE hipq_jobs SET
    run_at = CASE WHEN waiting_for = 1
      THEN {later.format("after_run_at", "NEW.updated_at")} ELSE run_at END,
    waiting_reason = CASE WHEN waiting_for = 1 THEN NULL ELSE waiting_reason END,
    waiting_for = waiting_for - 1,
    updated_at = NEW.updated_at
  WHERE {waiting} AND {RELEASES}"""


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
  {_count_down("max({0}, {1})", WAITING)};
  {SQLITE_MARK_DOOMED};
  {SQLITE_CANCEL_MARKED};
  {MARK};
END
"""

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION hipq_job_dependents() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  q text;
  doomed bigint[];
BEGIN
  FOR q IN WITH released AS (
    {_count_down("GREATEST({0}, {1})", PG_WAITING)}
    RETURNING queue, waiting_for
  ) SELECT DISTINCT queue FROM released WHERE waiting_for = 0 LOOP
    PERFORM pg_notify('hipq_jobs', q);
  END LOOP;
  IF NEW.state <> 'completed' THEN
    {PG_CANCEL_DOOMED};
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
