"""hipq_job_row: a job that gives only its type and payload evaluates fewer statements

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27

``hipq_job_row`` (0023) is the one definition of a new job's defaults and checks,
behind ``hipq_add_job`` and ``hipq_add_jobs``. Each call of ``hipq_add_job`` is
usually a transaction of its own, and PL/pgSQL prepares each expression it evaluates
once per transaction, so every statement on the way of a plain job costs its
preparation on every call. The same rules, in the same order, with less on that way:

- the check that no open job holds the correlation key runs only for a job that has
  one. Written as one condition (``key IS NOT NULL AND EXISTS (...)``) it ran the
  executor for every job, and was planned again on every call (with the key a known
  NULL, the planner folds the condition away, so a plan made for each call looked
  cheaper than the generic one);
- the checks of what a job may give beyond its type and payload (labels, priority
  and weight, timeout, flags, job_key, its mode and period) are each behind one
  test of whether it gave any of them.

The downgrade restores 0023's function.
"""

# The PL/pgSQL below keeps a check on one line where wrapping would hide its shape.
# ruff: noqa: E501

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def _revision_0023() -> ModuleType:
    """0023's module, whose hipq_job_row the downgrade restores (one copy of it)."""
    path = Path(__file__).with_name("0023_transactional_job_keys.py")
    spec = importlib.util.spec_from_file_location("hipq_alembic_0023", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# One job's row from its values (NULL: the job type's default), checked as a POST is:
# the one definition of a new job's defaults and checks, behind both entry points.
# ``p`` names a job of a list in the errors ("jobs[3].") as the batch API does. The
# parameters carry a prefix: unprefixed, they would clash with hipq_jobs' columns.
ROW = r"""
CREATE OR REPLACE FUNCTION hipq_job_row(p text, a_type text, a_payload jsonb, a_queue text,
  a_run_at timestamptz, a_priority numeric, a_weight numeric, a_labels jsonb,
  a_timeout double precision, a_max_attempts numeric, a_critical boolean, a_key text,
  a_flags jsonb, a_job_key text, a_mode text, a_unique_for double precision)
RETURNS hipq_jobs LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  jt hipq_job_types%ROWTYPE;
  r hipq_jobs%ROWTYPE;
  v_capacity integer;
  v_key text;
  extra text;
  known text;
BEGIN
  -- The job type, and its defaults.
  SELECT * INTO jt FROM hipq_job_types WHERE name = a_type;
  IF NOT FOUND THEN
    SELECT coalesce(string_agg(name, ', ' ORDER BY name), 'none: no hipq process has started on this database yet')
      INTO known FROM hipq_job_types;
    PERFORM hipq_refuse(p || 'type',
      'unknown job type ' || quote_literal(a_type) || ' (known: ' || known || ')');
  END IF;
  -- The queue: the job's or its type's, one of the configured queues.
  r.queue := coalesce(a_queue, jt.queue);
  SELECT concurrency INTO v_capacity FROM hipq_queue_capacities WHERE name = r.queue;
  IF NOT FOUND THEN
    PERFORM hipq_refuse(p || 'queue', 'unknown queue ' || quote_literal(r.queue));
  END IF;
  -- payload and labels: JSON objects; labels map names to strings.
  r.payload := coalesce(a_payload, '{}');
  IF jsonb_typeof(r.payload) <> 'object' THEN
    PERFORM hipq_refuse(p || 'payload', 'must be a JSON object');
  END IF;
  IF a_labels IS NOT NULL THEN
    IF jsonb_typeof(a_labels) <> 'object' THEN
      PERFORM hipq_refuse(p || 'labels', 'must be a JSON object of strings');
    ELSIF a_labels <> '{}' THEN
      SELECT key INTO extra FROM jsonb_each(a_labels) WHERE jsonb_typeof(value) <> 'string' ORDER BY key LIMIT 1;
      IF extra IS NOT NULL THEN
        PERFORM hipq_refuse(p || 'labels.' || extra, 'must be a string');
      END IF;
    END IF;
  END IF;
  r.labels := coalesce(a_labels, '{}');
  r.run_at := coalesce(a_run_at, now());
  -- Integers, in the ranges the API allows.
  IF a_priority IS NOT NULL OR a_weight IS NOT NULL THEN
    IF a_priority <> trunc(a_priority) OR abs(a_priority) > 2147483647 THEN
      PERFORM hipq_refuse(p || 'priority', 'must be an integer between -2147483647 and 2147483647');
    END IF;
    IF a_weight <> trunc(a_weight) OR a_weight NOT BETWEEN 1 AND 1000000 THEN
      PERFORM hipq_refuse(p || 'weight', 'must be an integer between 1 and 1000000');
    END IF;
  END IF;
  r.priority := coalesce(a_priority, jt.priority);
  r.weight := coalesce(a_weight, jt.weight);
  IF r.weight > v_capacity THEN  -- a queue without a capacity (NULL) takes any weight
    PERFORM hipq_refuse(p || 'weight', r.weight || ' exceeds the capacity ' || v_capacity || ' of queue ' || r.queue);
  END IF;
  IF a_timeout IS NOT NULL THEN
    IF a_timeout <= 0 THEN
      PERFORM hipq_refuse(p || 'timeout_seconds', 'must be greater than zero');
    ELSIF a_timeout > 3650 * 86400 THEN
      PERFORM hipq_refuse(p || 'timeout_seconds', 'must be at most 3650d');
    END IF;
  END IF;
  r.timeout_seconds := coalesce(a_timeout, jt.timeout_seconds);
  r.retry := jt.retry;
  IF a_max_attempts IS NOT NULL THEN
    IF a_max_attempts <> trunc(a_max_attempts) OR a_max_attempts NOT BETWEEN 1 AND 10000 THEN
      PERFORM hipq_refuse(p || 'max_attempts', 'must be an integer between 1 and 10000');
    END IF;
    IF jt.retry ->> 'strategy' = 'none' AND a_max_attempts > 1 THEN
      PERFORM hipq_refuse(p || 'max_attempts', 'job type ' || jt.name || ' never retries (retry strategy none)');
    END IF;
    r.retry := jt.retry || jsonb_build_object('max_attempts', a_max_attempts::bigint);
  END IF;
  r.critical := coalesce(a_critical, false);
  -- The correlation key: the job's own, or rendered from its type's template now;
  -- a template that needs the job's id or attempt is rendered by the loop at claim.
  IF a_key IS NOT NULL THEN
    IF jt.key_at_dispatch THEN
      PERFORM hipq_refuse(p || 'correlation_key',
        'job type ' || jt.name || ' builds its key per attempt (' || jt.correlation_key || ')');
    END IF;
    v_key := a_key;
  ELSIF jsonb_typeof(jt.key_parts) = 'array' AND NOT jt.key_at_dispatch THEN
    v_key := hipq_render_key(jt.key_parts,
      jsonb_build_object('payload', r.payload, 'labels', r.labels, 'type', jt.name), p || 'payload');
  END IF;
  IF v_key IS NOT NULL THEN
    IF v_key = '' THEN
      PERFORM hipq_refuse(p || 'correlation_key', 'a correlation key must not be empty');
    ELSIF v_key ~ '[\x01-\x1f\x7f-\x9f]' THEN
      PERFORM hipq_refuse(p || 'correlation_key',
        'a correlation key must not contain control characters (such as a newline)');
    ELSIF length(v_key) > 500 THEN
      PERFORM hipq_refuse(p || 'correlation_key', 'must be at most 500 characters');
    END IF;
    r.correlation_key := v_key;  -- checked: it fits its column
  END IF;
  -- The flags, and the job_key, its mode and its period, as the API checks them.
  IF a_flags IS NOT NULL OR a_job_key IS NOT NULL OR a_mode IS NOT NULL OR a_unique_for IS NOT NULL THEN
    IF a_flags IS NOT NULL THEN
      r.flags := hipq_flags(a_flags, p);
    END IF;
    IF a_job_key IS NOT NULL THEN
      IF a_job_key = '' THEN
        PERFORM hipq_refuse(p || 'job_key', 'a job_key must not be empty');
      ELSIF a_job_key ~ '[\x01-\x1f\x7f-\x9f]' THEN
        PERFORM hipq_refuse(p || 'job_key', 'a job_key must not contain control characters (such as a newline)');
      ELSIF a_job_key IN ('.', '..') THEN
        PERFORM hipq_refuse(p || 'job_key', 'a job_key cannot be ''.'' or ''..'' (clients remove such a URL path segment)');
      ELSIF length(a_job_key) > 500 THEN
        PERFORM hipq_refuse(p || 'job_key', 'must be at most 500 characters');
      END IF;
    END IF;
    IF a_mode NOT IN ('replace', 'preserve_run_at', 'unsafe_dedupe') THEN
      PERFORM hipq_refuse(p || 'job_key_mode', 'must be one of replace, preserve_run_at, unsafe_dedupe');
    END IF;
    IF a_unique_for IS NOT NULL AND a_job_key IS NULL THEN
      PERFORM hipq_refuse(p || 'unique_for', 'needs a job_key: the key is what is unique');
    ELSIF NOT (a_unique_for > 0 AND a_unique_for <= 3650 * 86400) THEN
      PERFORM hipq_refuse(p || 'unique_for', 'must be greater than zero and at most 3650d');
    END IF;
  END IF;
  -- The unique index would refuse the key too; this names the field (a race still
  -- ends in the index's unique_violation). A keyed job's own holder may hold it: it
  -- is replaced or returned (a take-over's insert meets the index). Only a job with a
  -- key looks: one condition with the look-up inside ran (and was planned) for all.
  IF r.correlation_key IS NOT NULL THEN
    IF EXISTS (SELECT 1 FROM hipq_jobs WHERE correlation_key = r.correlation_key
        AND state IN ('scheduled', 'running', 'awaiting')
        AND (a_job_key IS NULL OR job_key IS DISTINCT FROM a_job_key)) THEN
      PERFORM hipq_refuse(p || 'correlation_key', 'correlation_key is already used by an open job', 'HQ409');
    END IF;
  END IF;
  r.type := jt.name;
  r.state := 'scheduled';
  r.job_key := a_job_key;
  r.attempt := 0;
  r.created_at := now();
  r.updated_at := r.created_at;
  r.cancel_requested := false;
  RETURN r;
END
$fn$;
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(sa.text(ROW))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    row = _revision_0023().ROW
    op.execute(sa.text(row.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)))
