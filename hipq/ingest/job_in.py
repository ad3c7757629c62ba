"""A job as a caller gives it (``POST /v1/jobs``, ``Service.add_job``, a schedule's fire),
checked for shape before the intake resolves it (pydantic lives at the edges only: this
is the edge every way in shares)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
)

from hipq.dependencies import MAX_AFTER
from hipq.store.schema import KEY_MAX_LENGTH

# Ids are BIGINT (PostgreSQL) / INTEGER (SQLite): a larger number is a 422, not a driver error.
MAX_ID = 2**63 - 1

_INT32 = 2**31 - 1
# Instants outside this range are client bugs, and near datetime's limits the window
# and deadline arithmetic would overflow.
EARLIEST, LATEST = datetime(1970, 1, 1, tzinfo=UTC), datetime(9000, 1, 1, tzinfo=UTC)


def _plausible(value: datetime) -> datetime:
    if not EARLIEST <= value < LATEST:
        raise ValueError("must be between 1970-01-01 and 9000-01-01")
    return value


def _written(value: Any) -> Any:
    # An instant is written as RFC 3339 text: a number would be taken as Unix seconds,
    # which the schema does not say and a client may not mean.
    if not isinstance(value, str | datetime):
        raise ValueError("must be an RFC 3339 date-time string")
    return value


RunAt = Annotated[AwareDatetime, BeforeValidator(_written), AfterValidator(_plausible)]


def _duration(value: Any) -> float | str:
    # One check instead of a float | str union: a JSON true is not one second, and a
    # refusal names the field instead of each member of the union.
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError("expected a duration such as '30s' or a number of seconds")
    if isinstance(value, int) and abs(value) > 2**53:  # float() would overflow or round
        raise ValueError("out of range: at most 3650d")
    return value if isinstance(value, str) else float(value)


Duration = Annotated[float | str, PlainValidator(_duration, json_schema_input_type=float | str)]


# A job's labels are read by throttlers at every tick and shown by the dashboard: a
# bounded few, of bounded size (docs/api.md).
MAX_LABELS = 50
MAX_LABEL_NAME = 100
MAX_LABEL_VALUE = 500
Labels = Annotated[
    dict[
        Annotated[str, Field(max_length=MAX_LABEL_NAME)],
        Annotated[str, Field(max_length=MAX_LABEL_VALUE)],
    ],
    Field(max_length=MAX_LABELS),
]

# No control characters, C0, DEL or C1 (U+0085 is a line break to many readers).
FlagName = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")]
TargetName = Annotated[str, Field(min_length=1, max_length=200)]
# A job ``after`` names: its id, or a job key.
AfterRef = Annotated[
    Annotated[StrictInt, Field(ge=1, le=MAX_ID)]
    | Annotated[str, Field(min_length=1, max_length=KEY_MAX_LENGTH)],
    Field(union_mode="left_to_right"),
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WindowIn(_In):
    start: str = Field(description="opening wall-clock time, HH:MM")
    end: str = Field(
        description="closing wall-clock time, HH:MM; earlier than start wraps midnight"
    )
    tz: str = Field("UTC", description="IANA time zone")
    days: str | list[str] | None = Field(None, description="e.g. 'mon-fri' (the day it opens)")


class RetryIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    strategy: str | None = Field(None, description="exponential, fixed, none, or a plugin")
    max_attempts: StrictInt | None = Field(
        None, ge=1, le=10_000, description="attempts in all, the first one included"
    )


class JobIn(_In):
    type: str = Field(min_length=1, max_length=200, description="a job type from the config")
    payload: dict[str, Any] = Field(default_factory=dict, description="a JSON object")
    queue: str | None = Field(None, max_length=200, description="default: the job type's queue")
    run_at: RunAt | None = Field(None, description="not before this instant (RFC 3339)")
    run_in: Duration | None = Field(
        None, description="not before this long from now (seconds or '10m'); not with run_at"
    )
    priority: StrictInt | None = Field(None, ge=-_INT32, le=_INT32, description="lower runs first")
    weight: StrictInt | None = Field(None, ge=1, le=1_000_000, description="capacity units")
    labels: Labels = Field(
        default_factory=dict,
        description=(
            f"used by throttlers: at most {MAX_LABELS}, names up to {MAX_LABEL_NAME} "
            f"characters, values up to {MAX_LABEL_VALUE}"
        ),
    )
    windows: list[WindowIn] | None = Field(
        None, max_length=100, description="time-of-day windows it may start in"
    )
    timeout: Duration | None = Field(None, description="seconds, or a duration such as '24h'")
    retry: RetryIn | None = Field(
        None, description="the retry strategy; without strategy, merged into the job type's"
    )
    correlation_key: str | None = Field(
        None,
        min_length=1,
        max_length=KEY_MAX_LENGTH,
        description="the key its response carries, unique among open jobs; no control "
        "characters, not '.' or '..', not ending in '/heartbeat' (its callback URL must "
        "carry it); default: built from the job type's template",
    )
    job_key: str | None = Field(
        None,
        min_length=1,
        max_length=KEY_MAX_LENGTH,
        description="at most one open job per key (see job_key_mode); no control "
        "characters, not '.' or '..' (the by-key routes must carry it)",
    )
    job_key_mode: Literal["replace", "preserve_run_at", "unsafe_dedupe"] | None = Field(
        None,
        description="for a job_key an open job holds: replace (default) its fields, the "
        "same but preserve_run_at (until its first attempt), or unsafe_dedupe (return that "
        "job, or one that failed for good, unchanged)",
    )
    unique_for: Duration | None = Field(
        None,
        description="with job_key: a job with the key created within this period (seconds "
        "or e.g. '1h') is returned unchanged, whatever its state; after it, job_key_mode "
        "applies",
    )
    critical: StrictBool = Field(
        False, description="passes throttlers that let critical work through"
    )
    flags: list[FlagName] | None = Field(
        None, max_length=20, description="an operator may forbid flags on a queue at run time"
    )
    notify: list[TargetName] | None = Field(
        None,
        max_length=20,
        description=(
            "names of notifications.targets that receive the job's outcome (each terminal "
            "state); default: the job type's notify; [] sends none"
        ),
    )
    after: list[AfterRef] | None = Field(
        None,
        max_length=MAX_AFTER,
        description=(
            "jobs it runs after: ids, or job keys (a job of the same batch first, else the "
            "newest job with that key); it stays scheduled until all of them finished"
        ),
    )
    after_failed: Literal["cancel", "run"] | None = Field(
        None,
        description="when a job it runs after fails or is cancelled: cancel (default) this "
        "one too, or run it anyway",
    )
    batch_id: StrictInt | None = Field(
        None,
        ge=1,
        le=MAX_ID,
        description="join this batch (open, or sealed and not finished yet): it counts "
        "the job and waits for it; a batch that finished is a 409, an unknown one a 422",
    )

    def fields_set(self) -> dict[str, Any]:
        """As ``model_dump(exclude_unset=True, exclude_none=True)``, at a third of its cost
        (the batch path calls it per job): only the nested models are dumped."""
        data: dict[str, Any] = {}
        for name in self.model_fields_set:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, BaseModel):
                value = value.model_dump(exclude_unset=True, exclude_none=True)
            elif name == "windows":
                value = [w.model_dump(exclude_unset=True, exclude_none=True) for w in value]
            data[name] = value
        data["type"] = self.type
        return data
