"""Key templates: build a correlation key from a job or from a response message.

A template is text with placeholders, e.g. ``"{payload.order_id}:{attempt}"``,
``"{value.order_id}:{value.request_id}"``, ``"{headers.correlation_id}"`` or
``"{key}"``. A placeholder is a dotted path whose first part (the root) must be
one of the roots the caller allows; ``{{`` and ``}}`` stand for literal braces.

Templates are compiled when the config is loaded, so that a typo such as
``{paylod.order_id}`` stops ``hipq serve`` at start-up rather than failing every
job later. Rendering is strict: a missing or null value is an error, never an
empty string or ``"None"``, because a wrong correlation key silently matches the
wrong response (or none).

Path parts are separated by dots, so a key that itself contains a dot cannot be
addressed; a numeric part indexes a list (``{payload.items.0.sku}``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

from hipq.jobs import Job

__all__ = [
    "JOB_CONTEXT_FIELDS",
    "JOB_ROOTS",
    "KAFKA_RESPONSE_ROOTS",
    "SIGNED_BODY_ROOTS",
    "KeyTemplate",
    "PathError",
    "Placeholder",
    "TemplateError",
    "compile_template",
    "find_value",
    "job_context",
    "kafka_headers",
    "new_job_context",
    "scalar_text",
]

# The fields of a job its templates (its correlation key, its request) can read, in the
# order of ``job_context``: a request template's roots (hipq.transports.rendering).
JOB_CONTEXT_FIELDS = ("payload", "labels", "type", "id", "attempt", "correlation_key")
# Roots a job type's correlation_key template may use: all of them but the key itself.
JOB_ROOTS: frozenset[str] = frozenset(JOB_CONTEXT_FIELDS) - {"correlation_key"}
# Roots a Kafka response source's key template may use.
KAFKA_RESPONSE_ROOTS: frozenset[str] = frozenset({"key", "value", "headers", "topic"})
# Roots a job type's callback_signature.key may use: the signed body, parsed as JSON.
SIGNED_BODY_ROOTS: frozenset[str] = frozenset({"body"})


class TemplateError(ValueError):
    """A template that cannot be compiled, or a context it cannot be rendered from.

    ``placeholder`` names the offending placeholder when there is one, so that an
    API error or a log line can point at it.
    """

    def __init__(self, message: str, placeholder: str | None = None) -> None:
        super().__init__(message)
        self.placeholder = placeholder


@dataclass(frozen=True, slots=True)
class Placeholder:
    """One ``{root.part.part}`` of a template."""

    text: str
    path: tuple[str, ...]

    @property
    def root(self) -> str:
        return self.path[0]


@dataclass(frozen=True, slots=True)
class KeyTemplate:
    """A compiled template; build it with :func:`compile_template`."""

    text: str
    parts: tuple[str | Placeholder, ...]

    @property
    def placeholders(self) -> tuple[str, ...]:
        """The placeholders in order of first appearance, without duplicates."""
        seen: dict[str, None] = {}
        for part in self.parts:
            if isinstance(part, Placeholder):
                seen.setdefault(part.text, None)
        return tuple(seen)

    @property
    def roots(self) -> frozenset[str]:
        """The roots this template reads (e.g. to know whether it depends on ``attempt``)."""
        return frozenset(p.root for p in self.parts if isinstance(p, Placeholder))

    def render(self, context: Mapping[str, Any]) -> str:
        """Fill the placeholders from ``context``; raise :class:`TemplateError` if one can't be.

        An empty result is refused too: an empty correlation key would match
        nothing, or worse, every other empty key.
        """
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            else:
                out.append(_format_value(part, _lookup(part, context)))
        result = "".join(out)
        if not result:
            raise TemplateError(f"template {self.text!r} rendered an empty key")
        return result

    def __str__(self) -> str:
        return self.text


def compile_template(text: str, roots: Iterable[str]) -> KeyTemplate:
    """Parse and validate ``text``; every placeholder's root must be in ``roots``."""
    if not isinstance(text, str):
        raise TemplateError(f"a template must be a string, not {type(text).__name__}")
    if not text:
        raise TemplateError("a template must not be empty")
    allowed = frozenset(roots)

    parts: list[str | Placeholder] = []
    literal: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "{":
            if i + 1 < n and text[i + 1] == "{":
                literal.append("{")
                i += 2
                continue
            end = text.find("}", i + 1)
            nested = text.find("{", i + 1)
            if end == -1:
                raise TemplateError(f"unclosed '{{' at position {i} in template {text!r}")
            if nested != -1 and nested < end:
                raise TemplateError(
                    f"'{{' inside a placeholder at position {nested} in template {text!r}"
                    " (write '{{' for a literal brace)"
                )
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(_parse_placeholder(text[i + 1 : end], text, allowed))
            i = end + 1
        elif c == "}":
            if i + 1 < n and text[i + 1] == "}":
                literal.append("}")
                i += 2
                continue
            raise TemplateError(
                f"unmatched '}}' at position {i} in template {text!r}"
                " (write '}}' for a literal brace)"
            )
        else:
            literal.append(c)
            i += 1
    if literal:
        parts.append("".join(literal))
    return KeyTemplate(text=text, parts=tuple(parts))


def kafka_headers(headers: Iterable[tuple[str, bytes | None]]) -> dict[str, bytes | None]:
    """Turn aiokafka's list of ``(name, value)`` header pairs into a mapping for ``headers``.

    Kafka allows a header name to repeat; the last one wins, as Java's
    ``Headers.lastHeader`` does, since a later header is usually the override.
    """
    return dict(headers)


def _parse_placeholder(inner: str, text: str, allowed: frozenset[str]) -> Placeholder:
    shown = "{" + inner + "}"
    if not inner.strip():
        raise TemplateError(f"empty placeholder {shown} in template {text!r}", shown)
    path = tuple(inner.split("."))
    for segment in path:
        if not segment:
            raise TemplateError(
                f"placeholder {shown} has an empty path part in template {text!r}", inner
            )
        if segment != segment.strip():
            raise TemplateError(
                f"placeholder {shown} has spaces around a path part in template {text!r}", inner
            )
        # Brackets are format()/Jinja habits; a clear error now beats a
        # "missing" value at run time, since no JSON key is looked up that way.
        if "[" in segment or "]" in segment:
            raise TemplateError(
                f"placeholder {shown} uses brackets; write list indexes as dotted parts,"
                " e.g. {payload.items.0}",
                inner,
            )
    if path[0] not in allowed:
        choices = ", ".join(sorted(allowed)) or "(none)"
        raise TemplateError(
            f"unknown placeholder {shown} in template {text!r}:"
            f" {path[0]!r} is not one of {choices}",
            inner,
        )
    return Placeholder(text=inner, path=path)


_MISSING = object()
PathProblem = Literal["missing", "null", "not_an_index", "not_a_container"]


class PathError(LookupError):
    """Why a placeholder's path finds no value; each kind of template words it its own way.

    ``depth`` is the index of the path part at fault; ``value`` what that part was
    looked up in (for ``not_an_index`` and ``not_a_container``).
    """

    def __init__(self, problem: PathProblem, depth: int, value: Any = None) -> None:
        super().__init__(problem)
        self.problem, self.depth, self.value = problem, depth, value


def find_value(path: Sequence[str], context: Mapping[str, Any]) -> Any:
    """The value at ``path`` (mapping keys and list indexes) in ``context``.

    A null value stops the walk as a ``null`` problem wherever it is on the path:
    whether a null last part is a value is the caller's choice.
    """
    current: Any = context
    for depth, segment in enumerate(path):
        if isinstance(current, Mapping):
            current = current.get(segment, _MISSING)
        elif isinstance(current, Sequence) and not isinstance(current, str | bytes | bytearray):
            if not (segment.isascii() and segment.isdigit()):
                raise PathError("not_an_index", depth, current)
            index = int(segment)
            current = current[index] if index < len(current) else _MISSING
        else:
            raise PathError("not_a_container", depth, current)
        if current is _MISSING:
            raise PathError("missing", depth)
        if current is None:
            raise PathError("null", depth)
    return current


def scalar_text(value: Any) -> str | None:
    """A JSON string, number or boolean as text; None for anything else.

    Non-finite floats are None too: no JSON number spells them.
    """
    # bool before int: bool is a subclass of int, and JSON spells it true/false.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        # 17.0 and 17 are the same JSON number; the key must not depend on
        # which of the two a client happened to send.
        return str(int(value)) if value.is_integer() else repr(value)
    return None


def job_context(job: Job) -> dict[str, Any]:
    """The values a job's templates (its correlation key, its request) can read."""
    return dict(zip(JOB_CONTEXT_FIELDS, _job_context_values(job), strict=True))


_job_context_values = attrgetter(*JOB_CONTEXT_FIELDS)


def new_job_context(type: str, payload: Any, labels: Mapping[str, str]) -> dict[str, Any]:
    """What a correlation key built at creation can read: the job has no id or attempt yet."""
    return {"payload": payload, "labels": labels, "type": type}


def _lookup(placeholder: Placeholder, context: Mapping[str, Any]) -> Any:
    name = placeholder.text
    try:
        return find_value(placeholder.path, context)
    except PathError as exc:
        walked = ".".join(placeholder.path[: exc.depth])
        segment = placeholder.path[exc.depth]
        if exc.problem == "not_an_index":
            message = f"{walked} is a list; {segment!r} is not an index (in {{{name}}})"
        elif exc.problem == "not_a_container":
            message = f"{walked} is {_describe(exc.value)}; it has no {segment!r} (in {{{name}}})"
        elif exc.problem == "null":
            message = f"{name} is missing (it is null)"
        else:
            message = f"{name} is missing"
        raise TemplateError(message, name) from None


def _format_value(placeholder: Placeholder, value: Any) -> str:
    name = placeholder.text
    if isinstance(value, bytes | bytearray | memoryview):
        # Kafka header values (and message keys) arrive as bytes.
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise TemplateError(f"{name} is not valid UTF-8 text", name) from None
    text = scalar_text(value)
    if text is not None:
        return text
    if isinstance(value, float):
        raise TemplateError(f"{name} is {value}, which cannot be part of a key", name)
    raise TemplateError(
        f"{name} is {_describe(value)}; only strings, numbers and booleans can be part of a key",
        name,
    )


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return f"a {type(value).__name__}"
