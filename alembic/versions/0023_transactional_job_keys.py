"""job keys, flags and unique_for in the SQL functions of transactional enqueue

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26

``hipq_add_job`` and ``hipq_add_jobs`` (0007) take a job's ``flags``, ``job_key``,
``job_key_mode`` and ``unique_for``, as graphile-worker's ``add_job`` takes the first
three, with the semantics a POST has (docs/job-keys.md): ``hipq_key_action`` is
``hipq.job_keys.key_action`` in SQL, and a keyed add returns the id of the job its key
decided on. ``hipq_add_job`` gains parameters, so it is dropped and created again
(CREATE OR REPLACE with another parameter list would make a second function beside
the first). The downgrade restores 0007's functions.
"""

# The PL/pgSQL below keeps a check on one line where wrapping would hide its shape.
# ruff: noqa: E501

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def _revision_0007() -> ModuleType:
    """0007's module, whose functions the downgrade restores (one copy of them)."""
    path = Path(__file__).with_name("0007_transactional_enqueue.py")
    spec = importlib.util.spec_from_file_location("hipq_alembic_0007", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# A job's flags as the API takes them: a list of at most 20 names of 1 to 100
# characters without control characters, stored sorted and once each (NULL for none).
FLAGS = r"""
CREATE FUNCTION hipq_flags(flags jsonb, p text) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  flag jsonb;
  idx bigint;
BEGIN
  IF flags IS NULL OR jsonb_typeof(flags) = 'null' THEN
    RETURN NULL;
  END IF;
  IF jsonb_typeof(flags) <> 'array' THEN
    PERFORM hipq_refuse(p || 'flags', 'must be a list of flag names');
  END IF;
  IF jsonb_array_length(flags) > 20 THEN
    PERFORM hipq_refuse(p || 'flags', 'must hold at most 20 flags');
  END IF;
  FOR flag, idx IN SELECT f, n - 1 FROM jsonb_array_elements(flags) WITH ORDINALITY AS t(f, n) LOOP
    IF jsonb_typeof(flag) <> 'string' OR length(flag #>> '{}') NOT BETWEEN 1 AND 100 OR (flag #>> '{}') ~ '[\x01-\x1f]' THEN
      PERFORM hipq_refuse(p || 'flags[' || idx || ']', 'must be a flag name: 1 to 100 characters, no control characters');
    END IF;
  END LOOP;
  RETURN (SELECT jsonb_agg(f ORDER BY f) FROM (SELECT DISTINCT value COLLATE "C" AS f FROM jsonb_array_elements_text(flags)) AS d);
END
$fn$;
"""

# A duration as the API takes it: seconds, or text such as '1h30m' (hipq.durations;
# hipq.ingest.mirrored_intake checks the same form).
UNIQUE_FOR = r"""
CREATE FUNCTION hipq_unique_for(value jsonb, field text) RETURNS double precision
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  t text := replace(value #>> '{}', ' ', '');
  part text[];
  s double precision := 0;
BEGIN
  IF jsonb_typeof(value) = 'number' THEN
    s := t::double precision;
  ELSIF jsonb_typeof(value) = 'string' AND t ~ '^\d+(\.\d+)?$' THEN
    s := t::double precision;
  ELSIF jsonb_typeof(value) = 'string' AND t ~ '^(\d+(\.\d+)?(ms|s|m|h|d))+$' THEN
    FOR part IN SELECT regexp_matches(t, '(\d+(?:\.\d+)?)(ms|s|m|h|d)', 'g') LOOP
      s := s + part[1]::double precision
        * CASE part[2] WHEN 'ms' THEN 0.001 WHEN 's' THEN 1 WHEN 'm' THEN 60 WHEN 'h' THEN 3600 ELSE 86400 END;
    END LOOP;
  ELSE
    PERFORM hipq_refuse(field, 'must be a number of seconds or a duration such as ''1h'' or ''90s''');
  END IF;
  RETURN s;  -- its range: hipq_job_row's
END
$fn$;
"""

# hipq.job_keys.key_action, the one decision of a keyed add, in SQL (tests/transactional/
# test_job_keys.py compares the two over every input).
KEY_ACTION = r"""
CREATE FUNCTION hipq_key_action(mode text, holder_state text, holder_attempt bigint, in_period boolean)
RETURNS text LANGUAGE sql IMMUTABLE AS $fn$
  SELECT CASE
    WHEN in_period THEN 'return'
    WHEN holder_state IS NULL OR NOT (holder_state IN ('scheduled', 'running', 'awaiting')
      OR (mode = 'unsafe_dedupe' AND holder_state = 'failed')) THEN 'insert'
    WHEN mode = 'unsafe_dedupe' THEN 'return'
    WHEN holder_state <> 'scheduled' THEN 'take_over'
    WHEN mode = 'preserve_run_at' AND holder_attempt = 0 THEN 'replace_keep_run_at'
    ELSE 'replace'
  END
$fn$;
"""

# The columns of a new row that this path sets (the rest stay NULL), in table order;
# a replacement writes those of them a new job takes but job_key and queue
# (hipq.job_keys.replacing).
ROW_COLUMNS = (
    "queue type state payload labels windows retry run_at priority weight timeout_seconds"
    " critical correlation_key job_key attempt created_at updated_at cancel_requested flags"
).split()
REPLACED = (
    "type payload labels windows retry priority weight timeout_seconds critical"
    " correlation_key flags"
).split()

# The insert of a job row, written once here and run by each function that inserts
# (handing the 30-column row to a function of its own cost a fifth of a call).
_INSERT_SQL = f"""INSERT INTO hipq_jobs ({", ".join(ROW_COLUMNS)})
      VALUES ({", ".join("r." + c for c in ROW_COLUMNS)})"""

# A keyed add, as the store's (hipq.store.jobs): the period's first job, else the
# holder of the key, locked, and the decision applied to it. An insert that meets a
# key another transaction took meanwhile waits for it, and the next round looks again.
INSERT_KEYED = f"""
CREATE FUNCTION hipq_insert_keyed(r hipq_jobs, mode text, unique_for double precision)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  earlier bigint;
  holder hipq_jobs%ROWTYPE;
  action text;
  new_id bigint;
BEGIN
  FOR round IN 1..5 LOOP
    earlier := NULL;
    holder := NULL;
    IF unique_for IS NOT NULL THEN
      SELECT id INTO earlier FROM hipq_jobs WHERE job_key = r.job_key
        AND created_at >= r.created_at - make_interval(secs => unique_for)
        ORDER BY created_at, id LIMIT 1;
    END IF;
    IF earlier IS NULL THEN
      SELECT * INTO holder FROM hipq_jobs WHERE job_key = r.job_key
        AND (state IN ('scheduled', 'running', 'awaiting') OR (mode = 'unsafe_dedupe' AND state = 'failed'))
        ORDER BY state IN ('scheduled', 'running', 'awaiting') DESC, id DESC LIMIT 1 FOR UPDATE;
    END IF;
    action := hipq_key_action(mode, holder.state, holder.attempt, earlier IS NOT NULL);
    IF action = 'return' THEN
      RETURN coalesce(earlier, holder.id);
    ELSIF action = 'take_over' THEN
      UPDATE hipq_jobs SET job_key = NULL, retry = '{{"strategy": "none"}}', updated_at = r.updated_at
        WHERE id = holder.id;
    ELSIF action <> 'insert' THEN
      UPDATE hipq_jobs SET {", ".join(f"{c} = r.{c}" for c in REPLACED)},
          run_at = CASE WHEN action = 'replace_keep_run_at' THEN hipq_jobs.run_at ELSE r.run_at END,
          updated_at = r.updated_at, waiting_reason = NULL, last_error = NULL
        WHERE id = holder.id AND state = 'scheduled';
      RETURN holder.id;
    END IF;
    -- A key an open job took meanwhile inserts nothing: the next round finds that job.
    {_INSERT_SQL}
      ON CONFLICT (job_key) WHERE job_key IS NOT NULL AND state IN ('scheduled', 'running', 'awaiting')
      DO NOTHING RETURNING id INTO new_id;
    IF new_id IS NOT NULL THEN
      RETURN new_id;
    END IF;
  END LOOP;
  PERFORM hipq_refuse('job_key', 'job_key ' || quote_literal(r.job_key) || ' is contended; try again', 'HQ409');
  RETURN NULL;
END
$fn$;
"""

# One job's row from its values (NULL: the job type's default), checked as a POST is:
# the one definition of a new job's defaults and checks, behind both entry points.
# ``p`` names a job of a list in the errors ("jobs[3].") as the batch API does. The
# parameters carry a prefix: unprefixed, they would clash with hipq_jobs' columns.
ROW = r"""
CREATE FUNCTION hipq_job_row(p text, a_type text, a_payload jsonb, a_queue text,
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
  r.labels := coalesce(a_labels, '{}');
  IF jsonb_typeof(r.labels) <> 'object' THEN
    PERFORM hipq_refuse(p || 'labels', 'must be a JSON object of strings');
  END IF;
  IF r.labels <> '{}' THEN
    SELECT key INTO extra FROM jsonb_each(r.labels) WHERE jsonb_typeof(value) <> 'string' ORDER BY key LIMIT 1;
    IF extra IS NOT NULL THEN
      PERFORM hipq_refuse(p || 'labels.' || extra, 'must be a string');
    END IF;
  END IF;
  r.run_at := coalesce(a_run_at, now());
  -- Integers, in the ranges the API allows.
  r.priority := jt.priority;
  IF a_priority IS NOT NULL THEN
    IF a_priority <> trunc(a_priority) OR abs(a_priority) > 2147483647 THEN
      PERFORM hipq_refuse(p || 'priority', 'must be an integer between -2147483647 and 2147483647');
    END IF;
    r.priority := a_priority;
  END IF;
  r.weight := jt.weight;
  IF a_weight IS NOT NULL THEN
    IF a_weight <> trunc(a_weight) OR a_weight NOT BETWEEN 1 AND 1000000 THEN
      PERFORM hipq_refuse(p || 'weight', 'must be an integer between 1 and 1000000');
    END IF;
    r.weight := a_weight;
  END IF;
  IF v_capacity IS NOT NULL AND r.weight > v_capacity THEN
    PERFORM hipq_refuse(p || 'weight', r.weight || ' exceeds the capacity ' || v_capacity || ' of queue ' || r.queue);
  END IF;
  r.timeout_seconds := coalesce(a_timeout, jt.timeout_seconds);
  IF a_timeout <= 0 THEN
    PERFORM hipq_refuse(p || 'timeout_seconds', 'must be greater than zero');
  ELSIF a_timeout > 3650 * 86400 THEN
    PERFORM hipq_refuse(p || 'timeout_seconds', 'must be at most 3650d');
  END IF;
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
  END IF;
  r.correlation_key := v_key;  -- checked: it fits its column
  IF a_flags IS NOT NULL THEN
    r.flags := hipq_flags(a_flags, p);
  END IF;
  -- The job_key, its mode and its period, as the API checks them.
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
  -- The unique index would refuse the key too; this names the field (a race still
  -- ends in the index's unique_violation). A keyed job's own holder may hold it: it
  -- is replaced or returned (a take-over's insert meets the index).
  IF r.correlation_key IS NOT NULL AND EXISTS (SELECT 1 FROM hipq_jobs WHERE correlation_key = r.correlation_key
      AND state IN ('scheduled', 'running', 'awaiting')
      AND (a_job_key IS NULL OR job_key IS DISTINCT FROM a_job_key)) THEN
    PERFORM hipq_refuse(p || 'correlation_key', 'correlation_key is already used by an open job', 'HQ409');
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

# The jobs of a JSON list, each checked for its JSON shape and made a row by
# hipq_job_row (0007's function, now with a job's flags and its job_key).
INSERT = r"""
CREATE OR REPLACE FUNCTION hipq_insert_jobs(jobs jsonb, many boolean)
RETURNS bigint[] LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  allowed constant text[] := ARRAY['type', 'payload', 'queue', 'run_at', 'priority', 'weight',
    'labels', 'timeout_seconds', 'max_attempts', 'critical', 'correlation_key', 'flags', 'job_key',
    'job_key_mode', 'unique_for'];
  job jsonb;
  idx bigint;
  p text;
  extra text;
  v_run_at timestamptz;
  v_mode text;
  v_unique_for double precision;
  r hipq_jobs%ROWTYPE;
  new_id bigint;
  ids bigint[] := '{}';
  queues text[] := '{}';
BEGIN
  IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
    PERFORM hipq_refuse('jobs', 'must be a JSON array of job objects');
  END IF;
  IF jsonb_array_length(jobs) = 0 THEN
    PERFORM hipq_refuse('jobs', 'must hold at least one job');
  END IF;
  FOR job, idx IN SELECT j, n - 1 FROM jsonb_array_elements(jobs) WITH ORDINALITY AS t(j, n)
                  ORDER BY n LOOP
    p := CASE WHEN many THEN 'jobs[' || idx || '].' ELSE '' END;
    IF jsonb_typeof(job) <> 'object' THEN
      PERFORM hipq_refuse(rtrim(p, '.'), 'must be a JSON object');
    END IF;
    SELECT k INTO extra FROM jsonb_object_keys(job) AS k WHERE k <> ALL (allowed) ORDER BY k LIMIT 1;
    IF extra IS NOT NULL THEN
      PERFORM hipq_refuse(p || extra, 'unknown field (known: ' || array_to_string(allowed, ', ') || ')');
    END IF;
    IF jsonb_typeof(job -> 'type') IS DISTINCT FROM 'string' THEN
      PERFORM hipq_refuse(p || 'type', 'must be the name of a job type');
    END IF;
    IF jsonb_typeof(job -> 'queue') NOT IN ('string', 'null') THEN
      PERFORM hipq_refuse(p || 'queue', 'must be a string');
    END IF;
    -- run_at: an instant with its offset (RFC 3339); default now.
    v_run_at := NULL;
    IF nullif(job -> 'run_at', 'null') IS NOT NULL THEN
      IF jsonb_typeof(job -> 'run_at') <> 'string'
         OR (job ->> 'run_at') !~ '^\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(:\d\d(\.\d+)?)?([Zz]|[+-]\d\d(:?\d\d)?)$' THEN
        PERFORM hipq_refuse(p || 'run_at', 'must be an RFC 3339 instant with an offset, e.g. 2026-01-05T12:00:00Z');
      END IF;
      BEGIN
        v_run_at := (job ->> 'run_at')::timestamptz;
      EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format THEN
        PERFORM hipq_refuse(p || 'run_at', 'is not a valid instant');
      END;
    END IF;
    IF jsonb_typeof(job -> 'priority') NOT IN ('number', 'null') THEN
      PERFORM hipq_refuse(p || 'priority', 'must be an integer between -2147483647 and 2147483647');
    ELSIF jsonb_typeof(job -> 'weight') NOT IN ('number', 'null') THEN
      PERFORM hipq_refuse(p || 'weight', 'must be an integer between 1 and 1000000');
    ELSIF jsonb_typeof(job -> 'timeout_seconds') NOT IN ('number', 'null') THEN
      PERFORM hipq_refuse(p || 'timeout_seconds', 'must be a number of seconds');
    ELSIF jsonb_typeof(job -> 'max_attempts') NOT IN ('number', 'null') THEN
      PERFORM hipq_refuse(p || 'max_attempts', 'must be an integer between 1 and 10000');
    ELSIF jsonb_typeof(job -> 'critical') NOT IN ('boolean', 'null') THEN
      PERFORM hipq_refuse(p || 'critical', 'must be true or false');
    ELSIF jsonb_typeof(job -> 'correlation_key') NOT IN ('string', 'null') THEN
      PERFORM hipq_refuse(p || 'correlation_key', 'must be a string');
    ELSIF jsonb_typeof(job -> 'job_key') NOT IN ('string', 'null') THEN
      PERFORM hipq_refuse(p || 'job_key', 'must be a string');
    END IF;
    -- A mode that is not a string is no mode: hipq_job_row refuses it.
    v_mode := CASE WHEN jsonb_typeof(job -> 'job_key_mode') = 'string' THEN job ->> 'job_key_mode'
                   WHEN nullif(job -> 'job_key_mode', 'null') IS NOT NULL THEN '' END;
    -- A period without a key: hipq_job_row says that the key is missing.
    v_unique_for := CASE WHEN nullif(job -> 'unique_for', 'null') IS NULL THEN NULL
                         WHEN nullif(job -> 'job_key', 'null') IS NULL THEN 1
                         ELSE hipq_unique_for(job -> 'unique_for', p || 'unique_for') END;
    r := hipq_job_row(p, job ->> 'type', nullif(job -> 'payload', 'null'), job ->> 'queue', v_run_at,
      (job ->> 'priority')::numeric, (job ->> 'weight')::numeric, nullif(job -> 'labels', 'null'),
      (job ->> 'timeout_seconds')::double precision, (job ->> 'max_attempts')::numeric,
      (job ->> 'critical')::boolean, job ->> 'correlation_key', nullif(job -> 'flags', 'null'),
      job ->> 'job_key', v_mode, v_unique_for);
    IF r.job_key IS NULL THEN
      __INSERT__
        RETURNING id INTO new_id;
    ELSE
      new_id := hipq_insert_keyed(r, coalesce(v_mode, 'replace'), v_unique_for);
    END IF;
    ids := ids || new_id;
    IF NOT r.queue = ANY (queues) THEN
      queues := queues || r.queue;
    END IF;
  END LOOP;
  -- Delivered at COMMIT, and never for a transaction that rolls back (hipq.batch_loop.wakeup).
  PERFORM pg_notify('hipq_jobs', q) FROM unnest(queues) AS q;
  RETURN ids;
END
$fn$;
""".replace("__INSERT__", _INSERT_SQL)

# One job from typed arguments: no JSON between the caller and the row, and nothing
# of job keys on the way of a job without one.
ADD_JOB = r"""
CREATE FUNCTION hipq_add_job(
  job_type text,
  payload jsonb DEFAULT NULL,
  queue text DEFAULT NULL,
  run_at timestamptz DEFAULT NULL,
  priority integer DEFAULT NULL,
  weight integer DEFAULT NULL,
  labels jsonb DEFAULT NULL,
  timeout_seconds double precision DEFAULT NULL,
  max_attempts integer DEFAULT NULL,
  critical boolean DEFAULT NULL,
  correlation_key text DEFAULT NULL,
  flags text[] DEFAULT NULL,
  job_key text DEFAULT NULL,
  job_key_mode text DEFAULT NULL,
  unique_for interval DEFAULT NULL
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
  r hipq_jobs%ROWTYPE;
  period double precision := extract(epoch FROM unique_for);
  new_id bigint;
BEGIN
  IF job_type IS NULL THEN
    PERFORM hipq_refuse('type', 'must be the name of a job type');
  END IF;
  r := hipq_job_row('', job_type, nullif(payload, 'null'), queue, run_at, priority, weight,
    nullif(labels, 'null'), timeout_seconds, max_attempts, critical, correlation_key,
    to_jsonb(flags), job_key, job_key_mode, period);
  IF job_key IS NULL THEN
    __INSERT__
      RETURNING id INTO new_id;
  ELSE
    new_id := hipq_insert_keyed(r, coalesce(job_key_mode, 'replace'), period);
  END IF;
  -- Delivered at COMMIT, and never for a transaction that rolls back (hipq.batch_loop.wakeup).
  PERFORM pg_notify('hipq_jobs', r.queue);
  RETURN new_id;
END
$fn$;
""".replace("__INSERT__", _INSERT_SQL)

ADD_JOB_0007 = (
    "hipq_add_job(text, jsonb, text, timestamptz, integer, integer, jsonb, double precision,"
    " integer, boolean, text)"
)
ADD_JOB_0023 = ADD_JOB_0007.replace("text)", "text, text[], text, text, interval)")
# Created by this revision, dropped by its downgrade (hipq_add_job apart).
FUNCTIONS = (
    "hipq_job_row(text, text, jsonb, text, timestamptz, numeric, numeric, jsonb, double precision,"
    " numeric, boolean, text, jsonb, text, text, double precision)",
    "hipq_insert_keyed(hipq_jobs, text, double precision)",
    "hipq_key_action(text, text, bigint, boolean)",
    "hipq_unique_for(jsonb, text)",
    "hipq_flags(jsonb, text)",
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(sa.text(f"DROP FUNCTION {ADD_JOB_0007}"))
    ddl = (FLAGS, UNIQUE_FOR, KEY_ACTION, INSERT_KEYED, ROW, INSERT, ADD_JOB)
    for statement in ddl:
        op.execute(sa.text(statement))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    old = _revision_0007()
    op.execute(sa.text(f"DROP FUNCTION {ADD_JOB_0023}"))
    op.execute(sa.text(old.INSERT.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")))
    for signature in FUNCTIONS:
        op.execute(sa.text(f"DROP FUNCTION {signature}"))
    op.execute(sa.text(old.ADD_JOB))
