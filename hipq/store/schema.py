"""The tables, as SQLAlchemy Core metadata. alembic/ holds the migrations that build them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import DateTime, TypeDecorator, TypeEngine

from hipq.store.state_guards import OPEN_STATES_SQL


class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC instant on both engines.

    PostgreSQL stores ``timestamptz``. SQLite has no time type: we store a
    fixed-width ISO string so that comparisons and ORDER BY in SQL are correct,
    and parse it with ``fromisoformat`` (much faster than a regex per value).
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(String(32))
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; hipq uses aware UTC instants")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            # isoformat pads the year to four digits (strftime's %Y does not on Linux).
            return value.replace(tzinfo=None).isoformat(" ", "microseconds")
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            # Stored without an offset (above): parsed with UTC's, eight times cheaper
            # than ``replace(tzinfo=UTC)`` after the parse.
            return datetime.fromisoformat(value + "+00:00")
        return value if value.tzinfo else value.replace(tzinfo=UTC)


Json = JSON().with_variant(JSONB(), "postgresql")
Id = BigInteger().with_variant(Integer(), "sqlite")  # INTEGER PRIMARY KEY is SQLite's rowid

metadata = MetaData()

# The open-key index's predicate, also the conflict target of a keyed insert.
OPEN_JOB_KEY_WHERE = text(f"job_key IS NOT NULL AND {OPEN_STATES_SQL}")

# Correlation keys and job keys, in characters.
KEY_MAX_LENGTH = 500
# A response's fingerprint: a SHA-256 in hex.
FINGERPRINT_LENGTH = 64
# A W3C traceparent is 55 characters; room for a later version's.
TRACE_CONTEXT_LENGTH = 128

jobs = Table(
    "hipq_jobs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("queue", String(200), nullable=False),
    Column("type", String(200), nullable=False),
    Column("state", String(16), nullable=False),
    Column("payload", Json, nullable=False),
    Column("labels", Json, nullable=False),
    Column("windows", Json, nullable=True),
    Column("retry", Json, nullable=False),
    Column("run_at", UTCDateTime, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("weight", Integer, nullable=False),
    Column("timeout_seconds", Float, nullable=False),
    Column("critical", Boolean, nullable=False),
    Column("correlation_key", String(KEY_MAX_LENGTH), nullable=True),
    Column("job_key", String(KEY_MAX_LENGTH), nullable=True),
    Column("attempt", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("claimed_at", UTCDateTime, nullable=True),
    Column("deadline", UTCDateTime, nullable=True),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("result", Json, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("waiting_reason", Text, nullable=True),
    # An operator's request waits for the queue's loop (any kind, not only a cancel);
    # ``operator_request`` says which (NULL: a cancel). See hipq.operator_requests.
    Column("cancel_requested", Boolean, nullable=False),
    Column("operator_request", Json, nullable=True),
    # Flags an operator may forbid on the queue (graphile-worker's forbidden flags).
    Column("flags", Json, nullable=True),
    # The W3C traceparent of the span that enqueued the job (with tracing on; else NULL):
    # each attempt's span links to it.
    Column("trace_context", String(TRACE_CONTEXT_LENGTH), nullable=True),
    # The notification targets its outcome goes to (a JSON list of names from the
    # config's notifications.targets); NULL: none. See hipq.outbox.
    Column("notify", Json, nullable=True),
    # The process that sends the job's running attempt when its queue's owner handed
    # it over (``hipq.batch_loop.hand_off``); NULL: the owner sends it itself. The claim clears it.
    Column("executor", String(200), nullable=True),
    # The jobs it runs after (their ids; NULL: none), what a failed one does to it
    # (cancel | run), how many have not finished yet (0 or NULL: none), and its own
    # run_at while it waits (run_at is parked at AFTER_PARKED meanwhile). A trigger
    # (alembic 0022) counts down and releases or cancels; see hipq.dependencies.
    Column("after", Json, nullable=True),
    Column("after_failed", String(8), nullable=True),
    Column("waiting_for", Integer, nullable=True),
    Column("after_run_at", UTCDateTime, nullable=True),
    # Some job runs after it: only then does the trigger look for its dependents.
    Column("has_dependents", Boolean, nullable=True),
    # The batch it belongs to (hipq_batches), whose counts a trigger keeps.
    Column("batch_id", BigInteger, nullable=True),
    # Its owner: the tenant of the restricted token that added it; '' for the service
    # (an unrestricted token, the CLI, schedules, transactional enqueue). A key a caller
    # names (job_key, an ``after`` reference) is looked up within its owner only.
    Column("tenant", String(200), nullable=False, server_default=""),
    # The loop's due-jobs scan, one index per queue order, over scheduled jobs only.
    Index(
        "ix_hipq_jobs_due_time",
        "queue",
        "run_at",
        "priority",
        "id",
        postgresql_where=text("state = 'scheduled'"),
        sqlite_where=text("state = 'scheduled'"),
    ),
    Index(
        "ix_hipq_jobs_due_priority",
        "queue",
        "priority",
        "run_at",
        "id",
        postgresql_where=text("state = 'scheduled'"),
        sqlite_where=text("state = 'scheduled'"),
    ),
    # The jobs a failed or cancelled one is cancelling, while its trigger runs (alembic
    # 0028): empty between transactions.
    Index(
        "ix_hipq_jobs_cancelling",
        "id",
        postgresql_where=text("waiting_for = -1"),
        sqlite_where=text("waiting_for = -1"),
    ),
    Index("ix_hipq_jobs_state", "state", "id"),
    Index(
        "uq_hipq_jobs_open_correlation_key",
        "correlation_key",
        unique=True,
        postgresql_where=text(f"correlation_key IS NOT NULL AND {OPEN_STATES_SQL}"),
        sqlite_where=text(f"correlation_key IS NOT NULL AND {OPEN_STATES_SQL}"),
    ),
    Index(
        "uq_hipq_jobs_open_job_key",
        "tenant",
        "job_key",
        unique=True,
        postgresql_where=OPEN_JOB_KEY_WHERE,
        sqlite_where=OPEN_JOB_KEY_WHERE,
    ),
    # unique_for finds the jobs of a key created since an instant, in any state.
    Index(
        "ix_hipq_jobs_job_key_created",
        "job_key",
        "created_at",
        postgresql_where=text("job_key IS NOT NULL"),
        sqlite_where=text("job_key IS NOT NULL"),
    ),
    # Upkeep's classification finds the finished jobs of a pending response's key.
    Index(
        "ix_hipq_jobs_correlation_key",
        "correlation_key",
        postgresql_where=text("correlation_key IS NOT NULL"),
        sqlite_where=text("correlation_key IS NOT NULL"),
    ),
    Index(
        "ix_hipq_jobs_cancel_requested",
        "queue",
        postgresql_where=text("cancel_requested"),
        sqlite_where=text("cancel_requested"),
    ),
    # A batch's jobs, newest first (its page, and a join's count of its jobs).
    Index(
        "ix_hipq_jobs_batch",
        "batch_id",
        "id",
        postgresql_where=text("batch_id IS NOT NULL"),
        sqlite_where=text("batch_id IS NOT NULL"),
    ),
)

# One row per job and a job it runs after; ``outcome``: the prerequisite's terminal
# state once it reached one (it then counted, once).
job_dependencies = Table(
    "hipq_job_dependencies",
    metadata,
    Column("job_id", Id, ForeignKey("hipq_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("after_id", BigInteger, primary_key=True),
    Column("outcome", String(16), nullable=True),
    Index("ix_hipq_job_dependencies_after", "after_id", "job_id"),
)

# A batch of jobs (hipq.batches): its counts, kept by a trigger on hipq_jobs as its
# jobs change state (alembic 0022); open until sealed (jobs join it by id), finished
# once sealed with none pending, which puts the counts into the payload of its
# completion job, releases it, and writes the batch's notifications (a trigger on this
# table, alembic 0024).
batches = Table(
    "hipq_batches",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("total", Integer, nullable=False),
    Column("completed", Integer, nullable=False),
    Column("failed", Integer, nullable=False),
    Column("cancelled", Integer, nullable=False),
    Column("on_complete", String(200), nullable=True),  # the completion job's type
    Column("completion_job_id", BigInteger, nullable=True),
    Column("notify", Json, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("sealed_at", UTCDateTime, nullable=True),  # NULL: open, it cannot finish
    # The restricted token (tenant) that made it; NULL: an unrestricted caller (0027).
    Column("owner", String(200), nullable=True),
    # A completion job's unfinished batch: the walk that refuses a cycle of waits.
    Index(
        "ix_hipq_batches_completion",
        "completion_job_id",
        postgresql_where=text("finished_at IS NULL"),
        sqlite_where=text("finished_at IS NULL"),
    ),
)

# The last heartbeat of an external job's attempt (POST /v1/callbacks/{key}/heartbeat):
# written by the API, taken by the queue's loop, which alone moves the job's deadline
# (``pending`` until it has). One row per job; deleted with it.
job_heartbeats = Table(
    "hipq_job_heartbeats",
    metadata,
    Column("job_id", Id, ForeignKey("hipq_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("queue", String(200), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("beat_at", UTCDateTime, nullable=False),
    Column("deadline", UTCDateTime, nullable=False),
    Column("progress", Json, nullable=True),
    # A checkpoint sent with it, until the loop takes it (then NULL again).
    Column("checkpoint", Json, nullable=True),
    Column("pending", Boolean, nullable=False),
    Index(
        "ix_hipq_job_heartbeats_pending",
        "queue",
        postgresql_where=text("pending"),
        sqlite_where=text("pending"),
    ),
)

# Which pull worker took a job's claim (``hipq.store.pull_claims``): one row per job, for
# its latest fetched claim, told apart by attempt and claim time (a snooze gives the
# attempt back, and the next claim makes the same attempt again). A job in flight of a
# pull type is offered to workers while no row holds its current claim; the token's
# digest proves a worker's reports.
pull_claims = Table(
    "hipq_pull_claims",
    metadata,
    Column("job_id", Id, ForeignKey("hipq_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("attempt", Integer, nullable=False),
    Column("claimed_at", UTCDateTime, nullable=False),
    Column("token_digest", String(64), nullable=False),  # SHA-256, hex
    Column("worker", String(200), nullable=False),
    Column("fetched_at", UTCDateTime, nullable=False),
    # The fingerprint of the outcome its worker reported (``hipq.pull.reports``): set
    # once, so that a second, different outcome for the claim is refused at once.
    Column("reported", String(64), nullable=True),
)

attempts = Table(
    "hipq_attempts",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("job_id", Id, ForeignKey("hipq_jobs.id", ondelete="CASCADE"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("started_at", UTCDateTime, nullable=True),
    Column("finished_at", UTCDateTime, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("error", Text, nullable=True),
    Column("response", Json, nullable=True),
    # The traceback of a python handler's exception (its last TRACEBACK_MAX_CHARS); NULL
    # for other transports and other outcomes.
    Column("traceback", Text, nullable=True),
    # One row per attempt and outcome: settling again after a lost COMMIT reply adds
    # none (inserts skip an existing row); a late success accepted for a failed
    # attempt is the one second row an attempt may have.
    Index("ux_hipq_attempts_job_attempt", "job_id", "attempt", "outcome", unique=True),
    Index("ix_hipq_attempts_started", "started_at"),
)

# One row per queue: its lease (which process runs its loop) and operator flags.
queues = Table(
    "hipq_queues",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("paused", Boolean, nullable=False),
    Column("lease_owner", String(200), nullable=True),
    Column("lease_token", BigInteger, nullable=False),
    Column("lease_expires_at", UTCDateTime, nullable=True),
    # Written by the owner's loop when it changes: held jobs per throttler, capacity in
    # use per label value, throttler faults. Read by GET /v1/queues/{name}.
    Column("stats", Json, nullable=True),
    # Jobs carrying one of these flags wait, held with that reason (set at run time).
    Column("forbidden_flags", Json, nullable=True),
    # An operator's overrides of the configured limits (hipq.batch_loop.limits), read
    # by the owner with its lease; who changed them last (a token's name) and when.
    Column("limits", Json, nullable=True),
    Column("limits_changed_at", UTCDateTime, nullable=True),
    Column("limits_changed_by", String(200), nullable=True),
)

# One row per live hipq process: its heartbeat and the queues it may serve. Every
# process reads them to compute the same fair share of the queues
# (hipq.process.queue_share); a row whose heartbeat is older than lease_ttl is a dead
# process's, deleted by whichever process sees it first.
processes = Table(
    "hipq_processes",
    metadata,
    Column("id", String(200), primary_key=True),  # the lease owner name
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("heartbeat_at", UTCDateTime, nullable=False),
    Column("queues", Json, nullable=False),  # the queue names it may serve
    Column("version", String(50), nullable=True),  # the hipq it runs (NULL: before 0031)
)

# What an executor's transports reported of jobs handed to it (``hipq.batch_loop.hand_off``),
# waiting for the queue's owner to settle them at its tick, which deletes them.
reports = Table(
    "hipq_reports",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("queue", String(200), nullable=False),
    Column("job_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("kind", String(16), nullable=False),  # sent | outcome | heartbeat | checkpoint
    # The outcome (``hipq.batch_loop.outcome_wire``) or the checkpoint's payload; NULL otherwise.
    Column("body", Json, nullable=True),
    Column("deadline", UTCDateTime, nullable=True),  # a heartbeat's new deadline
    Index("ix_hipq_reports_queue", "queue", "id"),
)

idempotency_keys = Table(
    "hipq_idempotency_keys",
    metadata,
    Column("key", String(300), primary_key=True),
    Column("request_hash", String(64), nullable=False),
    Column("job_ids", Json, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_hipq_idempotency_created", "created_at"),
)

# The responses inbox: every callback or response message, stored before it is
# acknowledged. The owner loop of the job's queue matches it (status pending ->
# matched); upkeep classifies what never matches (duplicate, late, expired).
responses = Table(
    "hipq_responses",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("correlation_key", String(KEY_MAX_LENGTH), nullable=False),
    Column("source", String(300), nullable=False),  # "webhook" or "kafka:<topic>"
    Column("received_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("succeeded", Boolean, nullable=False),
    Column("reason", Text, nullable=True),
    Column("body", Json, nullable=True),
    Column("headers", Json, nullable=True),
    Column("job_type", String(200), nullable=True),
    Column("status", String(16), nullable=False),  # pending matched duplicate late expired
    Column("job_id", Id, nullable=True),
    Column("forced_job_id", Id, nullable=True),  # an operator's match by hand
    Column("settled_at", UTCDateTime, nullable=True),
    # What tells a copy from a new response under the same key (hipq.ingest.response_intake).
    Column("fingerprint", String(FINGERPRINT_LENGTH), nullable=True),
    # The job's attempt a matched response settled: a late response is a duplicate
    # only if the job's last attempt had its answer.
    Column("job_attempt", Integer, nullable=True),
    Index(
        "ix_hipq_responses_pending_key",
        "correlation_key",
        postgresql_where=text("status = 'pending'"),
        sqlite_where=text("status = 'pending'"),
    ),
    Index("ix_hipq_responses_status", "status", "id"),
    Index("ix_hipq_responses_expires", "expires_at"),
    Index("ix_hipq_responses_fingerprint", "correlation_key", "fingerprint"),
    # A signed callback's webhook-id is taken once per job type, whatever its key.
    Index("ix_hipq_responses_type_fingerprint", "job_type", "fingerprint"),
)

# The signed heartbeats taken (their webhook-id's fingerprint, as for responses), so
# that one is accepted once per job type; upkeep forgets them once no signature that
# old would verify.
heartbeat_messages = Table(
    "hipq_heartbeat_messages",
    metadata,
    Column("job_type", String(200), primary_key=True),
    Column("fingerprint", String(FINGERPRINT_LENGTH), primary_key=True),
    Column("received_at", UTCDateTime, nullable=False),
    Index("ix_hipq_heartbeat_messages_received", "received_at"),
)

# Kafka messages that cannot become responses (not UTF-8, not JSON, no key, too
# large): kept with the reason, and their offsets are committed.
parked_messages = Table(
    "hipq_parked_messages",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("source", String(300), nullable=False),
    Column("partition", Integer, nullable=True),
    Column("offset", BigInteger, nullable=True),
    Column("reason", Text, nullable=False),
    Column("key", Text, nullable=True),
    Column("value", Text, nullable=True),
    Column("received_at", UTCDateTime, nullable=False),
    Index("ix_hipq_parked_received", "received_at"),
)

# What adding a job inside an application's own transaction needs from the config
# (hipq.transactional, the SQL function hipq_add_job): each job type's defaults and
# its correlation key template, and the queues with their capacity. hipq keeps the
# config in YAML, not in the database, so a starting process writes these rows
# (hipq.store.job_types_mirror); the last process to start defines them.
# None is SQL NULL here, not JSON null (SQL tests "IS NULL").
NullableJson = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")

job_types_mirror = Table(
    "hipq_job_types",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("queue", String(200), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("weight", Integer, nullable=False),
    Column("timeout_seconds", Float, nullable=False),
    Column("retry", Json, nullable=False),
    # The template's text, and its parts for SQL: [{"text": ...} | {"path": [...], "name": ...}].
    Column("correlation_key", Text, nullable=True),
    Column("key_parts", NullableJson, nullable=True),
    # The key needs the job's id or attempt: the queue's loop builds it at claim.
    Column("key_at_dispatch", Boolean, nullable=False),
    # The labels its jobs start with (theirs win) and its notification targets (NULL: none).
    Column("labels", Json, nullable=False, server_default=text("'{}'")),
    Column("notify", NullableJson, nullable=True),
    Column("written_by", String(200), nullable=False),
    Column("written_at", UTCDateTime, nullable=False),
)

queues_mirror = Table(
    "hipq_queue_capacities",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("concurrency", Integer, nullable=True),  # capacity units; NULL is unlimited
    Column("written_by", String(200), nullable=False),
    Column("written_at", UTCDateTime, nullable=False),
)


# Recurring jobs (hipq.schedules): one row per schedule, from the config or the API.
schedules = Table(
    "hipq_schedules",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("source", String(16), nullable=False),  # "config" or "api"
    Column("cron", String(200), nullable=False),
    Column("timezone", String(100), nullable=False),
    Column("job", Json, nullable=False),  # the job template, API field names
    Column("catch_up", String(16), nullable=False),  # none | latest | all
    Column("backfill_seconds", Float, nullable=False),
    Column("overlap", String(16), nullable=False),  # allow | skip | buffer_one | cancel_other
    Column("paused", Boolean, nullable=False),
    # Paused by the scheduler when the job of its latest fire time fails for good.
    Column("pause_on_failure", Boolean, nullable=False),
    Column("paused_reason", Text, nullable=True),  # why the scheduler paused it
    # Fire times up to this instant have been decided (made a job, skipped or dropped).
    Column("checked_until", UTCDateTime, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

# One row per fire time that was decided: the unique key is the claim that makes any
# number of processes create each fire time's job once (inserted with the job).
schedule_fires = Table(
    "hipq_schedule_fires",
    metadata,
    Column("schedule", String(200), primary_key=True),
    Column("fire_time", UTCDateTime, primary_key=True),
    Column("job_id", Id, nullable=True),  # null: skipped (overlap)
    Column("outcome", String(16), nullable=False),  # created | skipped | run_now
    Column("created_at", UTCDateTime, nullable=False),
)


# Operators' bulk operations on the jobs a filter matches (hipq.store.bulk): done in
# batches of bounded size, each its own short transaction, which advances ``cursor``
# (the last job id handled) and the counts that GET /v1/jobs/bulk/{id} shows.
bulk_operations = Table(
    "hipq_bulk_operations",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("action", String(16), nullable=False),
    Column("filter", Json, nullable=False),
    Column("params", Json, nullable=False),
    Column("state", String(16), nullable=False),  # running | done | failed
    Column("cursor", BigInteger, nullable=False),
    Column("matched", BigInteger, nullable=False),
    Column("changed", BigInteger, nullable=False),
    Column("requested", BigInteger, nullable=False),
    Column("skipped", BigInteger, nullable=False),
    Column("error", Text, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    Index(
        "ix_hipq_bulk_operations_running",
        "id",
        postgresql_where=text("state = 'running'"),
        sqlite_where=text("state = 'running'"),
    ),
)


# The outbox of outcome notifications (hipq.outbox): one row per terminal state a job
# with ``notify`` reaches, per target, written by a trigger on hipq_jobs in the same
# transaction as the state change (alembic 0012), so a change that rolls back leaves no
# row and every committed one has its row. The row holds the outcome as it was then;
# the notifier sends it after the commit and records each try.
notifications = Table(
    "hipq_notifications",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    # The job it tells of, no foreign key: it may outlive its job; or, with no job (and
    # no job type or queue), the batch that finished (alembic 0024).
    Column("job_id", BigInteger, nullable=True),
    Column("target", String(200), nullable=False),
    Column("job_type", String(200), nullable=True),
    Column("queue", String(200), nullable=True),
    Column("job_state", String(16), nullable=False),  # completed | failed | cancelled | finished
    Column("attempt", Integer, nullable=False),
    Column("result", Json, nullable=True),
    Column("error", Text, nullable=True),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("status", String(16), nullable=False),  # pending | failing | sent
    Column("attempts", Integer, nullable=False),  # tries so far
    Column("next_attempt_at", UTCDateTime, nullable=False),
    # A process that took the row to send it owns it until then (several processes).
    Column("locked_until", UTCDateTime, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("sent_at", UTCDateTime, nullable=True),
    Column("batch_id", BigInteger, nullable=True),
    Index(
        "ix_hipq_notifications_due",
        "next_attempt_at",
        "id",
        postgresql_where=text("status <> 'sent'"),
        sqlite_where=text("status <> 'sent'"),
    ),
    Index("ix_hipq_notifications_job", "job_id", "id"),
    Index(
        "ix_hipq_notifications_batch",
        "batch_id",
        "id",
        postgresql_where=text("batch_id IS NOT NULL"),
        sqlite_where=text("batch_id IS NOT NULL"),
    ),
)
