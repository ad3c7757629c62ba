"""The job types of a configuration, compiled once at start.

One registry shared by intake (defaults, correlation keys built at creation),
the transports (request routes), the queue loops (keys built at claim, late and
signed responses) and the webhook (outcome rules). Each job type's templates and
rules are checked here, so a bad one stops ``hipq serve`` with one line.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hipq.config import JobTypeConfig, Settings
from hipq.outcome_rules import ANY_RESPONSE, OutcomeRule, OutcomeRuleError, rule_for
from hipq.plugins import PluginError, RetryStrategies
from hipq.templates import (
    JOB_ROOTS,
    SIGNED_BODY_ROOTS,
    KeyTemplate,
    TemplateError,
    compile_template,
)

# Roots known only once the job exists / is claimed: such keys are built at dispatch.
_LATE_ROOTS = frozenset({"id", "attempt"})
# A pull type's key is hipq's own, a new random one per claim (``new_pull_key``): a
# worker's report travels the inbox under it, so a report of an earlier claim can never
# settle a later one, and no one can name it who did not read it. The template only
# marks the type's key as built at claim; callers may not give a key with the prefix.
PULL_KEY = "hipq-pull:{id}:{attempt}"
PULL_KEY_PREFIX = "hipq-pull:"


def new_pull_key() -> str:
    """A pull job's correlation key for one claim: unguessable."""
    return PULL_KEY_PREFIX + secrets.token_urlsafe(24)


class JobTypeError(ValueError):
    """A job type of the configuration does not compile; ``field`` names its key."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True, slots=True)
class JobTypeInfo:
    name: str
    config: JobTypeConfig
    correlation: KeyTemplate | None
    # How a response for this type is judged (success or failure, and why).
    outcome_rule: OutcomeRule = ANY_RESPONSE
    # Where a signed callback's or heartbeat's body carries the correlation key
    # (callback_signature.key); None for a type without signatures.
    signed_key: KeyTemplate | None = None

    @property
    def key_at_dispatch(self) -> bool:
        """Its correlation key needs the job's id or attempt: built at claim."""
        return self.correlation is not None and bool(self.correlation.roots & _LATE_ROOTS)

    @property
    def external(self) -> bool:
        """Its request leaves hipq (http, kafka): a correlated response may settle it."""
        return self.config.transport.kind != "python"

    @property
    def pull(self) -> bool:
        """Run by workers that fetch its jobs (``hipq.pull``)."""
        return self.config.transport.kind == "pull"

    @property
    def takes_heartbeats(self) -> bool:
        """Its jobs' deadlines move with heartbeats (an external system's, a worker's)."""
        return self.config.heartbeat_timeout is not None or self.pull

    @property
    def accepts_late(self) -> bool:
        """``late_responses: accept``: a late success completes a failed job."""
        return self.config.late_responses == "accept"

    @property
    def signed(self) -> bool:
        """Its callbacks must carry a valid signature to settle it."""
        return bool(self.config.callback_signature)


class JobTypes(Mapping[str, JobTypeInfo]):
    """Every configured job type by name."""

    def __init__(self, types: Mapping[str, JobTypeInfo]) -> None:
        self._types = dict(types)

    @classmethod
    def compile(cls, settings: Settings, retry: RetryStrategies) -> JobTypes:
        out: dict[str, JobTypeInfo] = {}
        for name, jt in settings.job_types.items():
            template = None
            if jt.transport.kind == "pull":
                if jt.correlation_key:
                    raise JobTypeError(
                        f"job_types.{name}.correlation_key",
                        "a pull type's key is hipq's own (workers report by job id and token)",
                    )
                template = compile_template(PULL_KEY, JOB_ROOTS)
            elif jt.correlation_key:
                try:
                    template = compile_template(jt.correlation_key, JOB_ROOTS)
                except TemplateError as exc:
                    raise JobTypeError(f"job_types.{name}.correlation_key", str(exc)) from None
            try:
                retry.validate(jt.retry)
            except PluginError as exc:
                raise JobTypeError(f"job_types.{name}.retry", str(exc)) from None
            try:
                rule = rule_for(jt.outcome)
            except OutcomeRuleError as exc:
                raise JobTypeError(f"job_types.{name}.outcome", str(exc)) from None
            signed_key = None
            if jt.callback_signature is not None:
                try:
                    signed_key = compile_template(jt.callback_signature.key, SIGNED_BODY_ROOTS)
                except TemplateError as exc:
                    raise JobTypeError(
                        f"job_types.{name}.callback_signature.key", str(exc)
                    ) from None
            out[name] = JobTypeInfo(name, jt, template, rule, signed_key)
        return cls(out)

    def __getitem__(self, name: str) -> JobTypeInfo:
        return self._types[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)

    def lookup(self, name: Any) -> JobTypeInfo | None:
        """The job type called ``name``; None for an unknown name or a non-string."""
        return self._types.get(name) if isinstance(name, str) else None

    @property
    def any_external(self) -> bool:
        return any(t.external for t in self._types.values())

    def keys_at_dispatch(self) -> dict[str, KeyTemplate]:
        return {
            t.name: t.correlation
            for t in self._types.values()
            if t.key_at_dispatch and t.correlation is not None
        }

    def pulled(self) -> list[str]:
        """The types run by pull workers."""
        return [t.name for t in self._types.values() if t.pull]

    def accepting_late(self) -> list[str]:
        return [t.name for t in self._types.values() if t.accepts_late]

    def signed_types(self) -> list[str]:
        return [t.name for t in self._types.values() if t.signed]
