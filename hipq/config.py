"""hipq's configuration: one YAML file, environment variables override (``HIPQ_...``).

Nested keys use a double underscore in the environment, e.g. ``HIPQ_SERVER__PORT=9000``.
Every key is documented with its default in ``config.example.yaml``.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from hipq.durations import parse_duration
from hipq.security.signatures import SignatureError, decode_secret
from hipq.throttling import MAX_CAPACITY

Seconds = Annotated[float, BeforeValidator(parse_duration)]

# Off while load_settings(opens_database=False) reads a config: the database URL's check
# imports SQLAlchemy, a good part of a CLI call's CPU, for a URL that call never opens.
_CHECK_DATABASE_URL: ContextVar[bool] = ContextVar("check_database_url", default=True)


class ConfigError(ValueError):
    """A bad configuration: the message is one line that names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # Base of the callback URLs handed to external systems.
    public_url: str | None = None
    # Request bodies above this are refused with 413 before they are read whole. Parsed,
    # a body of small numbers takes about ten times its size in memory, and one call of
    # the JSON decoder holds the event loop about 4 ms per MiB: 8 MiB fits a small machine.
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_batch_jobs: int = Field(10_000, ge=1, le=100_000)
    # Host names (the Host header) the API answers to besides localhost, 127.0.0.1,
    # ::1 and the host of public_url; "*" answers to any (behind a proxy that checks
    # it). Anything else gets 421: a DNS-rebinding page cannot reach the API.
    allowed_hosts: list[str] = Field(default_factory=list)
    # Origins (scheme://host[:port]) whose pages may send state-changing requests;
    # pages of an allowed host always may. Others get 403.
    allowed_origins: list[str] = Field(default_factory=list)
    # A connection whose request headers are not complete this long after it opened
    # (or after the request's first byte) is closed.
    header_read_timeout: Seconds = Field(10.0, gt=0)
    # A request body not complete this long after its headers is cut off with 408
    # (a deadline for the whole body, however it trickles in).
    body_read_timeout: Seconds = Field(30.0, gt=0)
    # Connections (and requests) at once; further ones get 503 from the server.
    max_connections: int = Field(1000, ge=1)
    # Connections at once from one client address; its next one gets 503 at once
    # (null: no bound). Behind a proxy or load balancer every caller has its address:
    # list it in ``unlimited_peers`` (loopback is, for a proxy on the same host).
    max_connections_per_peer: int | None = Field(100, ge=1)
    unlimited_peers: list[str] = Field(default_factory=lambda: ["127.0.0.1", "::1"])
    # Requests held open by ?wait= at once, per token (per client address without
    # tokens); one more gets 429. Keeps one caller from holding every connection.
    max_waits_per_token: int = Field(20, ge=1)
    # Jobs per step of a bulk operation (POST /v1/jobs/bulk): each step is one short
    # transaction that commits its jobs and the operation's progress.
    bulk_step_size: int = Field(1000, ge=1, le=100_000)

    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")


class QueueConfig(_Strict):
    concurrency: int | None = Field(None, ge=1, le=MAX_CAPACITY)  # units; None = unlimited
    order: Literal["time_priority", "priority_time"] = "time_priority"
    batch_interval: Seconds = 1.0
    batch_size: int = Field(1000, ge=1, le=100_000)
    # Take the values of this label in turn (round robin, as Hatchet's group round
    # robin): a job's turn is the number of jobs of its value in flight or before it,
    # then `order` decides; a backlog of one value delays another's first job by one
    # turn, not by the backlog. None: the queue order alone.
    round_robin_label: str | None = Field(None, min_length=1, max_length=200)
    # With other live processes serving the queue, its owner sends claimed jobs itself
    # while it has fewer than this many of them running, and hands the rest to the least
    # loaded process: a hand-off costs round trips and CPU, worth paying only when the
    # owner's own sends fall behind. 0 hands every job to the least loaded process.
    hand_off_above: int = Field(32, ge=0)
    # Aging (priority_time order only): a due job's effective priority improves by one
    # for every `aging` it has waited, so low priorities are not starved forever.
    aging: Seconds | None = Field(None, gt=0)
    # A throttler that takes longer than this admits nothing that tick.
    throttler_time_limit: Seconds = Field(1.0, gt=0)
    # Applied in order; each item is {name: settings} naming a hipq.throttlers entry point.
    throttlers: list[dict[str, dict[str, Any] | None]] = Field(default_factory=list)

    @field_validator("throttlers")
    @classmethod
    def _one_name_each(cls, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, item in enumerate(items):
            if len(item) != 1:
                raise ValueError(
                    f"item {i} must name exactly one throttler, e.g. {{rate: {{...}}}}"
                )
        return items


class PythonTransport(_Strict):
    handler: str  # "package.module:function"

    @field_validator("handler")
    @classmethod
    def _shape(cls, value: str) -> str:
        module, _, attr = value.partition(":")
        if not module or not attr:
            raise ValueError("must look like 'package.module:function'")
        return value


class HttpTransport(_Strict):
    method: str = "POST"
    url: str  # template, e.g. "http://payments.internal/charges/{payload.order_id}"
    headers: dict[str, str] = Field(default_factory=dict)  # values are templates
    # Wait for the callback; false: the HTTP response itself is the result.
    callback: bool = True
    # Where the callback URL goes: this header, and this top-level body field (null: not).
    callback_header: str | None = "X-Callback-URL"
    callback_field: str | None = "callback_url"
    timeout: Seconds = 30.0
    # Template of the JSON body: strings that are one placeholder ("{payload.items}")
    # keep the value's JSON type. null sends the payload itself.
    body: Any = None
    # 4xx statuses that fail the job at once (other 4xx, 5xx and 429 are retried).
    non_retryable_statuses: list[int] = Field(default_factory=list)
    # Statuses (e.g. [429, 503]) whose Retry-After puts the job back to wait until then
    # without spending an attempt (a snooze); without Retry-After they are failures.
    snooze_statuses: list[int] = Field(default_factory=list)
    max_response_bytes: int = Field(1024 * 1024, ge=1)
    # Host names the url may name ("api.example.com", or "*.example.com" for its
    # subdomains); null: any. A config change cannot send this type's credentials
    # to a new host without also changing this list.
    allowed_hosts: list[str] | None = None
    # Keep cookies the destination sets and send them back on this job type's later
    # requests (its own jar, shared with no other type). Off: no cookie is kept.
    keep_cookies: bool = False

    @model_validator(mode="after")
    def _allowed_destination(self) -> HttpTransport:
        if self.allowed_hosts is None:
            return self
        # The scheme and host are written out before the first placeholder (rendering).
        host = urlsplit(self.url.split("{", 1)[0]).hostname or ""
        if not any(_host_allowed(host, pattern) for pattern in self.allowed_hosts):
            raise ValueError(
                f"the url's host {host!r} is not in allowed_hosts ({', '.join(self.allowed_hosts)})"
            )
        return self


def _host_allowed(host: str, pattern: str) -> bool:
    host, pattern = host.lower().rstrip("."), pattern.lower().rstrip(".")
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


class StatusRequest(_Strict):
    """Callback-or-poll: asked of the external system when a callback is overdue."""

    # The request: templates over the job, as the http transport's.
    method: str = "GET"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    body: Any = None  # a JSON template; null: no body
    timeout: Seconds = Field(30.0, gt=0)
    max_response_bytes: int = Field(1024 * 1024, ge=1)
    allowed_hosts: list[str] | None = None  # as the http transport's
    # Sent once this share of the job's timeout passed without a response ...
    after: float = Field(0.5, gt=0, lt=1)
    # ... and again this long after each "still working" answer (null: once).
    every: Seconds | None = Field(None, gt=0)
    # "Still working": an answer with one of these HTTP statuses, or whose outcome
    # field (the job type's outcome rule's field or header) holds one of these values.
    working_statuses: list[int] = Field(default_factory=lambda: [202])
    working: list[str | int | float | bool] = Field(default_factory=list)

    @model_validator(mode="after")
    def _allowed_destination(self) -> StatusRequest:
        if self.allowed_hosts is None:
            return self
        host = urlsplit(self.url.split("{", 1)[0]).hostname or ""
        if not any(_host_allowed(host, pattern) for pattern in self.allowed_hosts):
            raise ValueError(
                f"the url's host {host!r} is not in allowed_hosts ({', '.join(self.allowed_hosts)})"
            )
        return self


class KafkaTransport(_Strict):
    topic: str
    key: bool = True  # the correlation key as the message key
    header: str | None = "correlation_id"  # ... and/or in this header
    body: Any = None  # template of the JSON value, as for http; null sends the payload


class PullTransport(_Strict):
    """Run by workers that ask for the type's jobs (``POST /v1/workers/fetch``,
    ``hipq worker``); nothing to configure yet."""


_TRANSPORT_KINDS = ("python", "http", "kafka", "pull")


class TransportConfig(_Strict):
    python: PythonTransport | None = None
    http: HttpTransport | None = None
    kafka: KafkaTransport | None = None
    pull: PullTransport | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # `transport: pull` says all there is to say of a pull type.
        return {"pull": {}} if value == "pull" else value

    @model_validator(mode="after")
    def _exactly_one(self) -> TransportConfig:
        chosen = [n for n in _TRANSPORT_KINDS if getattr(self, n) is not None]
        if len(chosen) != 1:
            raise ValueError("name exactly one transport: python, http, kafka or pull")
        return self

    @property
    def kind(self) -> str:
        return next(n for n in _TRANSPORT_KINDS if getattr(self, n) is not None)


class CallbackSignature(_Strict):
    secret: str  # "whsec_<base64>" or a plain string
    tolerance: Seconds = Field(300.0, gt=0)  # replay window around webhook-timestamp
    # Where the signed body carries the job's correlation key, a template over it such
    # as "{body.order_id}": the URL (key and ?type=) is not signed, so a message is bound
    # to its job by what is. The key in the URL must equal it (docs/security.md).
    key: str = "{body.correlation_key}"

    @field_validator("secret")
    @classmethod
    def _usable_secret(cls, secret: str) -> str:
        # Checked at start: a bad secret would otherwise refuse every callback.
        try:
            decode_secret(secret)
        except SignatureError as exc:
            raise ValueError(exc.reason) from None
        return secret


class AuthConfig(_Strict):
    # A file of token lines (see hipq/security/tokens.py and docs/security.md); tokens also come
    # from HIPQ_TOKENS. Never the tokens themselves in this YAML file.
    tokens_file: str | None = None
    # An authenticating gateway sits in front: `hipq serve` may listen beyond loopback
    # without tokens of its own.
    behind_gateway: bool = False
    # /metrics without a token (e.g. a scraper on a private network); otherwise it
    # needs the read scope once tokens are configured.
    metrics_open: bool = False


class JobTypeConfig(_Strict):
    queue: str = "default"
    priority: int = 100
    weight: int = Field(1, ge=1)
    timeout: Seconds = 24 * 3600.0
    retry: dict[str, Any] = Field(default_factory=lambda: {"strategy": "exponential"})
    correlation_key: str | None = None
    transport: TransportConfig
    # Which responses mean success: {field: status, success: [ok]} or {header: ..., success: [...]}.
    outcome: dict[str, Any] | None = None
    # A response that arrives after its job failed or was cancelled: ignore (counted as
    # late) or accept (a successful one completes the job).
    late_responses: Literal["ignore", "accept"] = "ignore"
    # A job found `running` after a crash: send it again at once (resend), or count the
    # interrupted attempt as failed so the retry strategy's delay applies (retry).
    after_crash: Literal["resend", "retry"] = "resend"
    # Standard Webhooks signatures on POST /v1/callbacks/{key}?type=<this type>.
    callback_signature: CallbackSignature | None = None
    # How a callback for this type (`?type=`) proves itself once tokens are configured:
    # a Standard Webhooks signature, a token with the callbacks scope, or either.
    # Default: signature when callback_signature is set, else token.
    callback_auth: Literal["signature", "token", "either"] | None = None
    # External jobs: POST /v1/callbacks/{key}/heartbeat moves the attempt's deadline to
    # the heartbeat's time plus this; None: this type takes no heartbeats.
    heartbeat_timeout: Seconds | None = Field(None, gt=0)
    # External jobs: ask the system for the job's status when no response has come
    # after a share of the timeout; its final answer settles the job as a callback would.
    status_request: StatusRequest | None = None
    # Where each job's outcome goes by default: names of notifications.targets (a job
    # may choose others with its own `notify`). See docs/notifications.md.
    notify: list[str] = Field(default_factory=list)
    # Labels every job of this type carries unless it sets the same label itself (the
    # job's value wins): a `share` by type without every submitter adding the label.
    labels: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _signature_for_callback_auth(self) -> JobTypeConfig:
        if self.callback_auth in ("signature", "either") and self.callback_signature is None:
            raise ValueError(f"callback_auth {self.callback_auth!r} needs callback_signature")
        return self

    @property
    def callback_accepts(self) -> str:
        """signature, token or either: callback_auth or its default."""
        if self.callback_auth is not None:
            return self.callback_auth
        return "token" if self.callback_signature is None else "signature"


class KafkaResponseSource(_Strict):
    topic: str
    # The correlation key: "{key}" (message key), "{headers.correlation_id}", or a
    # template over the JSON value such as "{value.order_id}:{value.request_id}".
    key: str = "{key}"
    outcome: dict[str, Any] | None = None


class KafkaConfig(_Strict):
    enabled: bool = False
    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str = "hipq"  # a new group starts from the earliest offset
    max_message_bytes: int = Field(1024 * 1024, ge=1)  # larger responses are parked
    # The consumer group's liveness: a process that stops heartbeating for this long
    # loses its partitions to the others.
    session_timeout: Seconds = Field(10.0, gt=0)
    heartbeat_interval: Seconds = Field(3.0, gt=0)
    responses: list[KafkaResponseSource] = Field(default_factory=list)


class WebhookTarget(_Strict):
    url: str  # http(s) URL that receives a POST of the outcome as JSON
    # Standard Webhooks signing secret ("whsec_<base64>" or a plain string); null: unsigned.
    secret: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)  # sent as they are
    # A try that takes longer in total (waiting for one of the target's connections,
    # connecting, sending, the answer) fails and is retried.
    timeout: Seconds = Field(10.0, gt=0)
    # At most this much of an answer's body is read, and dropped: the status decides.
    max_response_bytes: int = Field(65_536, ge=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL")
        return url

    @field_validator("secret")
    @classmethod
    def _usable_secret(cls, secret: str | None) -> str | None:
        if secret is not None:
            try:
                decode_secret(secret)
            except SignatureError as exc:
                raise ValueError(exc.reason) from None
        return secret


class KafkaTarget(_Strict):
    topic: str = Field(min_length=1)  # the message key is the job id


class NotificationTarget(_Strict):
    """One place outcomes go: a webhook or a Kafka topic (exactly one)."""

    webhook: WebhookTarget | None = None
    kafka: KafkaTarget | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> NotificationTarget:
        if (self.webhook is None) == (self.kafka is None):
            raise ValueError("give exactly one of webhook, kafka")
        return self


class NotificationsConfig(_Strict):
    targets: dict[str, NotificationTarget] = Field(default_factory=dict)
    # How often each process looks for notifications to send (they are also sent as
    # soon as a job of this process settles).
    interval: Seconds = Field(1.0, gt=0)
    batch_size: int = Field(100, ge=1, le=10_000)  # notifications taken per step
    # Retries while a receiver is down: the delay doubles from `retry_initial` up to
    # `retry_max`, for ever (a notification is never dropped).
    retry_initial: Seconds = Field(1.0, gt=0)
    retry_max: Seconds = Field(600.0, gt=0)
    # A notification taken by a process is its own for this long (several processes on
    # PostgreSQL): a process that dies mid-send leaves it to another after this.
    lease: Seconds = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _tries_end_within_their_lease(self) -> NotificationsConfig:
        # A try still under way when its lease ends may be sent again by another process.
        for name, target in self.targets.items():
            if target.webhook is not None and target.webhook.timeout >= self.lease:
                raise ValueError(
                    f"targets.{name}.webhook.timeout ({target.webhook.timeout:g}s) must be"
                    f" shorter than lease ({self.lease:g}s)"
                )
        return self


class ResponsesConfig(_Strict):
    # An unmatched response (unknown key, or an early one) waits this long for its job.
    ttl: Seconds = 7 * 86400.0
    # Settled inbox rows and parked messages are deleted after this.
    retention: Seconds = 7 * 86400.0


class JobRetention(_Strict):
    # Finished jobs are deleted, with their attempts, this long after they finished;
    # null keeps them for ever.
    completed: Seconds | None = Field(None, gt=0)
    failed: Seconds | None = Field(None, gt=0)
    cancelled: Seconds | None = Field(None, gt=0)


class LoggingConfig(_Strict):
    # console: "time LEVEL logger: event key=value ..."; json: one JSON object per line.
    format: Literal["console", "json"] = "console"


class ScheduleConfig(_Strict):
    """A recurring job (hipq.schedules); checked in full at start."""

    cron: str  # five fields: minute hour day-of-month month day-of-week
    timezone: str = "UTC"  # IANA name, e.g. Europe/Berlin
    # The job made at each fire time: the fields of POST /v1/jobs except run_at. Strings
    # may hold {fire.time}, {fire.local}, {fire.date}, {fire.timestamp}, {schedule}.
    job: dict[str, Any]
    # Fire times missed while no hipq ran: none (dropped), latest (one job for the
    # newest), all (one job each), within `backfill` before now.
    catch_up: Literal["none", "latest", "all"] = "none"
    backfill: Seconds = Field(86400.0, ge=0, le=367 * 86400)
    # While the previous job is open: allow, skip, buffer_one (one waits), cancel_other.
    overlap: Literal["allow", "skip", "buffer_one", "cancel_other"] = "allow"
    # Pause the schedule when the job of its latest fire time fails for good.
    pause_on_failure: bool = False

    @field_validator("cron", "timezone")
    @classmethod
    def _fires(cls, value: str, info: Any) -> str:
        from datetime import UTC, datetime

        from hipq.schedules.cron import Cron, ScheduleError, zone

        try:
            if info.field_name == "timezone":
                zone(value)
            else:
                Cron.parse(value, "UTC", datetime.now(UTC))
        except ScheduleError as exc:
            raise ValueError(exc.message) from None
        return value


class SchedulerConfig(_Strict):
    # How often each process looks for due fire times.
    interval: Seconds = Field(1.0, gt=0)
    # A fire time at most this late is on time and always becomes a job; older ones
    # were missed and follow their schedule's catch_up.
    on_time: Seconds = Field(60.0, gt=0)


def sqlite_lock_path(database_url: str) -> Path | None:
    """The lock file that keeps a SQLite database to one ``hipq serve``
    (``<file>.lock``, ``hipq.store.process_guard``); None for PostgreSQL or an
    in-memory database. Here, light to import: ``hipq serve`` checks it first."""
    from sqlalchemy.engine import make_url

    url = make_url(database_url)
    db = url.database
    if url.get_backend_name() != "sqlite" or not db or db == ":memory:":
        return None
    return Path(db).resolve().with_name(Path(db).name + ".lock")


def sqlite_served_message(database: Path, holder: str) -> str:
    return (
        f"{database} is already served by {holder}; SQLite allows one hipq process per "
        "database file (use PostgreSQL to run several)"
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="HIPQ_", env_nested_delimiter="__", extra="forbid", case_sensitive=False
    )

    database_url: str = "sqlite+aiosqlite:///hipq.db"
    # Apply pending migrations at `hipq serve`; off: serve refuses a schema that is behind.
    migrate_on_start: bool = False
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    # A queue's loop is owned by one process through a lease; another takes over
    # when it has not been renewed for this long.
    lease_ttl: Seconds = 15.0
    # The queues this process may run (`hipq serve --queues a,b`); None: every queue of
    # the config. The live processes share the queues each may run (docs/design.md).
    serve_queues: list[str] | None = None
    # On SIGTERM: how long handlers and sends in flight may take to finish (nothing new
    # is claimed meanwhile) before the process stops at once.
    shutdown_grace: Seconds = Field(25.0, ge=0)
    idempotency_ttl: Seconds = 24 * 3600.0
    # How often a process counts the jobs of the queues it owns for /metrics' per-queue
    # gauges (hipq_queue_backlog, ...): one grouped read per interval, never per scrape.
    metrics_interval: Seconds = Field(15.0, gt=0)
    # How long `hipq serve` waits for an unreachable or starting database (with
    # backoff, /healthz answering meanwhile) before it gives up.
    database_wait: Seconds = 60.0
    # The database time each API request may use (lock and statement waits); past
    # it the request answers 503 and nothing it wrote is kept.
    api_db_timeout: Seconds = 10.0
    server: ServerConfig = Field(default_factory=ServerConfig)
    queues: dict[str, QueueConfig] = Field(default_factory=lambda: {"default": QueueConfig()})
    job_types: dict[str, JobTypeConfig] = Field(default_factory=dict)
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    responses: ResponsesConfig = Field(default_factory=ResponsesConfig)
    job_retention: JobRetention = Field(default_factory=JobRetention)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    # Recurring jobs by name; see docs/schedules.md.
    schedules: dict[str, ScheduleConfig] = Field(default_factory=dict)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    # Outcome notifications: targets and the sender's timing; see docs/notifications.md.
    notifications: NotificationsConfig = Field(default_factory=NotificationsConfig)

    @field_validator("database_url")
    @classmethod
    def _parses(cls, value: str) -> str:
        # Checked here, so that a malformed URL is one config error line (not a
        # traceback from the engine, later). The URL is not repeated: it may hold a password.
        if not _CHECK_DATABASE_URL.get():
            return value
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            host = make_url(value).host
        except (ArgumentError, ValueError) as exc:
            port = " (its port is not a number)" if isinstance(exc, ValueError) else ""
            raise ValueError(
                "cannot be read as a database URL such as sqlite+aiosqlite:///hipq.db "
                f"or postgresql+asyncpg://user@host/db{port}"
            ) from None
        # ``u@[bad:5432/db`` parses, with the host "[bad": connecting would then fail
        # like a database that is down, retried for a minute, instead of this line.
        if host and ("[" in host or "]" in host):
            raise ValueError(
                "cannot be read as a database URL: its host is neither a name nor an "
                "[IPv6] address in brackets"
            )
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML file arrives as init kwargs; the environment overrides it.
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _references(self) -> Settings:
        for name, jt in self.job_types.items():
            if jt.queue not in self.queues:
                known = ", ".join(sorted(self.queues))
                raise ValueError(f"job_types.{name}.queue: unknown queue {jt.queue!r} ({known})")
        targets = self.notifications.targets
        for name, spec in targets.items():
            if spec.kafka is not None and not self.kafka.enabled:
                raise ValueError(
                    f"notifications.targets.{name}: a Kafka target needs kafka.enabled"
                )
        for name, jt in self.job_types.items():
            for target in jt.notify:
                if target not in targets:
                    known = ", ".join(sorted(targets)) or "none configured"
                    raise ValueError(
                        f"job_types.{name}.notify: unknown notification target {target!r} ({known})"
                    )
        for name, schedule in self.schedules.items():
            from hipq.schedules.cron import ScheduleError
            from hipq.schedules.definition import check_name

            try:
                check_name(name)
            except ScheduleError as exc:
                raise ValueError(f"schedules.{name!r}: {exc.message}") from None
            job_type = schedule.job.get("type")
            if job_type not in self.job_types:
                known = ", ".join(sorted(self.job_types)) or "none configured"
                raise ValueError(
                    f"schedules.{name}.job.type: unknown job type {job_type!r} ({known})"
                )
        for queue in self.serve_queues or ():
            if queue not in self.queues:
                known = ", ".join(sorted(self.queues))
                raise ValueError(f"serve_queues: unknown queue {queue!r} ({known})")
        if self.lease_ttl < 1:
            raise ValueError("lease_ttl: must be at least 1s")
        if self.api_db_timeout <= 0 or self.database_wait < 0:
            raise ValueError("api_db_timeout must be positive and database_wait not negative")
        return self


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong and where, without the excerpt of the file PyYAML adds: the
    offending line may hold a secret."""
    problem = getattr(exc, "problem", None) or type(exc).__name__
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    context = getattr(exc, "context", None)
    return f"{context + ': ' if context else ''}{problem}{where}"


def load_settings(
    path: str | os.PathLike[str] | None = None, *, opens_database: bool = True, **overrides: Any
) -> Settings:
    """Settings from a YAML file (``path`` or ``HIPQ_CONFIG``), with env overrides.

    ``opens_database=False``: for a caller that reads the config but never opens the
    database (the CLI's API client, ``hipq healthcheck``): its URL is not checked."""
    path = path or os.environ.get("HIPQ_CONFIG")
    data: dict[str, Any] = {}
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config {path} is not valid YAML: {_yaml_problem(exc)}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config {path} must be a mapping of keys")
    data.update(overrides)
    checking = _CHECK_DATABASE_URL.set(opens_database)
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(f"config error: {_one_line(exc)}") from None
    finally:
        _CHECK_DATABASE_URL.reset(checking)
