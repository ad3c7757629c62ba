"""a job's end cancels every job that depends on it set-based, at any depth

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
one of those, with ``after_failed = 'cancel'``, at any depth); they are marked
(``waiting_for = -1``) with the reason each is cancelled (the prerequisite it runs
after that ended first: the root, or a job of the set); the jobs that run anyway
(``after_failed = 'run'``) after marked ones are counted down and released, the
marked ones' dependency rows keep their outcome, and one update cancels the marked
jobs. Their own dependents trigger does not fire (its WHEN skips a marked row: the
root did its part); the counts of their batches, the completion jobs those release
and their notifications move with each row, as before. On PostgreSQL the set is held
in an array that every statement reads by an index, and the function runs without
JIT (the planner's estimates of a walk of unknown depth made it compile each time).
The walk is a LATERAL subquery per job of a round there, so that each round reads the
indexes whatever the planner estimates; SQLite follows them as written. An index of
the marked rows (empty between transactions) lets SQLite find them again.

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

# The jobs being cancelled by the root, marked: only while its trigger runs, and only
# its own (SQLite has one writer; PostgreSQL's other transactions do not see the mark).
MARKED = "waiting_for = -1"


def _reason(cause: str) -> str:
    """Why a job is cancelled: ``cause``, its first prerequisite that ended (the root or
    one of the set, whatever order the rows are updated in)."""
    return f"""'job ' || {cause} || ' it runs after was '
      || CASE WHEN {cause} = NEW.id THEN NEW.state ELSE 'cancelled' END"""


def _first_ended(job: str, in_set: str) -> str:
    return f"""(SELECT min(d.after_id) FROM hipq_job_dependencies d
    WHERE d.job_id = {job} AND d.outcome IS NULL
      AND (d.after_id = NEW.id OR d.after_id {in_set}))"""


# Mark the jobs the end of NEW cancels, at any depth, each with its reason. No state
# changes: no trigger fires.
_SQLITE_SEED = SQLITE_STEP.format(
    walk="(SELECT NEW.id AS id)", test=f"NEW.state <> 'completed' AND {CANCELLED_BY}"
)
SQLITE_MARK_DOOMED = f"""UPDATE hipq_jobs SET {MARKED}, last_error = {_reason("c.cause")}
  FROM (WITH RECURSIVE doomed(id) AS (
    {_SQLITE_SEED}
    UNION
    {SQLITE_STEP.format(walk="doomed", test=CANCELLED_BY)}
  )
  SELECT x.id, {_first_ended("x.id", "IN (SELECT id FROM doomed)")} AS cause FROM doomed x) AS c
  WHERE hipq_jobs.id = c.id"""
_SQLITE_IN_SET = f"IN (SELECT id FROM hipq_jobs WHERE {MARKED})"


# The jobs that run anyway (``after_failed = 'run'``) after marked ones, counted down
# once per marked prerequisite, and due when none is left.
def _run_anyway(later: str, in_set: str) -> str:
    return f"""UPDATE hipq_jobs SET
    run_at = CASE WHEN waiting_for <= c.n
      THEN {later.format("after_run_at", "NEW.updated_at")} ELSE run_at END,
    waiting_reason = CASE WHEN waiting_for <= c.n THEN NULL ELSE waiting_reason END,
    waiting_for = CASE WHEN waiting_for <= c.n THEN 0 ELSE waiting_for - c.n END,
    updated_at = NEW.updated_at
  FROM (SELECT d.job_id, count(*) AS n FROM hipq_job_dependencies d
      WHERE d.after_id {in_set} AND d.outcome IS NULL GROUP BY d.job_id) AS c
  WHERE hipq_jobs.id = c.job_id AND hipq_jobs.state = 'scheduled'
    AND hipq_jobs.waiting_for > 0 AND hipq_jobs.after_failed = 'run'"""


# Their dependency rows keep the outcome, then they are cancelled: their own triggers
# do not fire (the mark), the root's statements did their part.
SQLITE_MARK_MARKED = f"""UPDATE hipq_job_dependencies SET outcome = 'cancelled'
  WHERE outcome IS NULL AND after_id {_SQLITE_IN_SET}"""
CANCEL_MARKED = f"""UPDATE hipq_jobs SET
    state = 'cancelled', waiting_for = 0, waiting_reason = NULL, run_at = after_run_at,
    finished_at = NEW.updated_at, updated_at = NEW.updated_at
  WHERE {MARKED}"""

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

# A job cancelled by another's end (marked) does not fire it.
WHEN = (
    "NEW.has_dependents AND NEW.state IN ('completed', 'failed', 'cancelled')"
    " AND NEW.state IS NOT OLD.state AND coalesce(OLD.waiting_for, 0) >= 0"
)

SQLITE_TRIGGER = f"""
CREATE TRIGGER hipq_jobs_dependents AFTER UPDATE OF state ON hipq_jobs FOR EACH ROW
WHEN {WHEN}
BEGIN
  {_count_down("max({0}, {1})", WAITING)};
  {SQLITE_MARK_DOOMED};
  {_run_anyway("max({0}, {1})", _SQLITE_IN_SET)};
  {SQLITE_MARK_MARKED};
  {CANCEL_MARKED};
  {MARK};
END
"""

# PostgreSQL holds the set in an array, read by the primary key and the indexes of the
# dependency rows (joined to a set it cannot estimate, its planner may scan the tables).
_IN_SET = "= ANY(doomed)"
PG_DOOMED = f"""ARRAY(WITH RECURSIVE doomed(id) AS (
      {PG_STEP.format(walk="(SELECT NEW.id AS id)", test=CANCELLED_BY)}
      UNION
      {PG_STEP.format(walk="doomed", test=CANCELLED_BY)}
    ) SELECT id FROM doomed)"""

PG_FUNCTION = f"""
CREATE OR REPLACE FUNCTION hipq_job_dependents() RETURNS trigger LANGUAGE plpgsql
SET jit = off AS $fn$
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
    doomed := {PG_DOOMED};
  END IF;
  IF cardinality(doomed) > 0 THEN
    -- (one that another transaction ended meanwhile stays as that ended it)
    UPDATE hipq_jobs SET {MARKED}, last_error = (SELECT {_reason("c.cause")} FROM (SELECT
        {_first_ended("hipq_jobs.id", "IN (SELECT unnest(doomed))")} AS cause) AS c)
      WHERE id {_IN_SET} AND state = 'scheduled' AND waiting_for > 0;
    FOR q IN WITH released AS (
      {_run_anyway("GREATEST({0}, {1})", _IN_SET)}
      RETURNING queue, waiting_for
    ) SELECT DISTINCT queue FROM released WHERE waiting_for = 0 LOOP
      PERFORM pg_notify('hipq_jobs', q);
    END LOOP;
    UPDATE hipq_job_dependencies SET outcome = 'cancelled'
      WHERE outcome IS NULL AND after_id {_IN_SET};
    {CANCEL_MARKED} AND id {_IN_SET};
  END IF;
  {MARK};
  RETURN NULL;
END
$fn$
"""

PG_TRIGGER = f"""
CREATE TRIGGER hipq_jobs_dependents AFTER UPDATE OF state ON hipq_jobs FOR EACH ROW
WHEN ({WHEN.replace("IS NOT OLD.state", "IS DISTINCT FROM OLD.state")})
EXECUTE FUNCTION hipq_job_dependents()
"""


def upgrade() -> None:
    op.create_index(
        "ix_hipq_batches_completion",
        "hipq_batches",
        ["completion_job_id"],
        postgresql_where=sa.text("finished_at IS NULL"),
        sqlite_where=sa.text("finished_at IS NULL"),
    )
    # The jobs being cancelled by a root (see MARKED): an index that is empty between
    # transactions.
    op.create_index(
        "ix_hipq_jobs_cancelling",
        "hipq_jobs",
        ["id"],
        postgresql_where=sa.text(MARKED),
        sqlite_where=sa.text(MARKED),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text("DROP TRIGGER hipq_jobs_dependents ON hipq_jobs"))
        op.execute(sa.text(PG_FUNCTION))
        op.execute(sa.text(PG_TRIGGER))
    else:
        op.execute(sa.text("DROP TRIGGER hipq_jobs_dependents"))
        op.execute(sa.text(SQLITE_TRIGGER))


def downgrade() -> None:
    """Back to 0022's recursive trigger."""
    script = context.script.get_revision("0022")
    assert script is not None and script.module is not None
    earlier = script.module
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text("DROP TRIGGER hipq_jobs_dependents ON hipq_jobs"))
        op.execute(sa.text(earlier.PG_FUNCTION.replace("CREATE ", "CREATE OR REPLACE ", 1)))
        op.execute(sa.text(earlier.PG_TRIGGER))
    else:
        op.execute(sa.text("DROP TRIGGER hipq_jobs_dependents"))
        op.execute(sa.text(earlier.SQLITE_TRIGGER))
    op.drop_index("ix_hipq_jobs_cancelling", "hipq_jobs")
    op.drop_index("ix_hipq_batches_completion", "hipq_batches")
