"""Request templates: what an ``http`` or ``kafka`` job sends, filled from the job.

A job type's URL, header values and body are templates over the job, with the
roots ``payload``, ``labels``, ``type``, ``id``, ``attempt`` and
``correlation_key`` (placeholders as in :mod:`hipq.templates`, ``{{``/``}}`` for
literal braces).

* URL and header templates render as text. Values put into a URL are
  percent-encoded, and the scheme and host must be written out in the template:
  where a request goes is the operator's decision, never a job payload's. A
  value that is ``.`` or ``..`` is refused: percent-encoding leaves dots alone,
  and a client or server would collapse such a segment, climbing out of the
  path the template names.
* The body template is JSON (a mapping, list or scalar from the config). A string
  that is exactly one placeholder (``"{payload.items}"``) keeps the value's JSON
  type, including ``null``; any other string renders as text. Object keys are
  literal.

Templates are compiled when the transport is built, so a typo stops ``hipq
serve`` at start with the job type's key in the message. Rendering is strict: a
missing value is a :class:`RenderError` (the job fails without retries, since
its payload would fail again the same way).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from hipq.templates import (
    JOB_CONTEXT_FIELDS,
    PathError,
    Placeholder,
    TemplateError,
    compile_template,
    find_value,
    job_context,
    scalar_text,
)

__all__ = [
    "REQUEST_ROOTS",
    "BodyTemplate",
    "RenderError",
    "RequestTemplateError",
    "TextTemplate",
    "compile_body",
    "compile_text",
    "compile_url",
    "job_context",  # the context a request template renders from (hipq.templates owns it)
]

# What a request template may read: the job's context (hipq.templates.job_context).
REQUEST_ROOTS: frozenset[str] = frozenset(JOB_CONTEXT_FIELDS)

# What the template must spell out before its first placeholder: the scheme and
# the whole authority (host and port), ended by the start of the path, query or fragment.
_FIXED_ORIGIN = re.compile(r"^https?://[^/?#{}\s]+[/?#]", re.IGNORECASE)


class RequestTemplateError(ValueError):
    """A request template in the config that cannot work; the message names its key."""


class RenderError(ValueError):
    """A job whose values cannot fill its request template."""


@dataclass(frozen=True, slots=True)
class TextTemplate:
    """A template that renders to text (a URL, a header value, a body string)."""

    text: str
    parts: tuple[str | Placeholder, ...]
    escape: Callable[[str], str] | None = None  # applied to each filled-in value
    check: Callable[[str], None] | None = None  # of the whole result (raises RenderError)

    def render(self, context: Mapping[str, Any]) -> str:
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = _as_text(part, _lookup(part, context))
            out.append(self.escape(value) if self.escape else value)
        rendered = "".join(out)
        if self.check is not None:
            self.check(rendered)
        return rendered


def compile_text(text: Any, where: str, *, secret: bool = False) -> TextTemplate:
    """Compile a text template; ``where`` names its config key in errors. A ``secret``
    one (a header value: a token, a password) is not repeated in them."""
    if not isinstance(text, str):
        raise RequestTemplateError(f"{where}: must be a string, not {type(text).__name__}")
    if not text:
        return TextTemplate(text, ())
    try:
        compiled = compile_template(text, REQUEST_ROOTS)
    except TemplateError as exc:
        message = str(exc)
        if secret:
            message = message.replace(repr(text), "(value not shown)")
        elif "://" in text:  # a URL: its userinfo and query may hold secrets
            message = message.replace(repr(text), repr(_without_secrets(text)))
        raise RequestTemplateError(f"{where}: {message}") from None
    return TextTemplate(text, compiled.parts)


def compile_url(text: Any, where: str) -> TextTemplate:
    """A URL template: fixed scheme and host, percent-encoded values."""
    template = compile_text(text, where)
    first = next((i for i, p in enumerate(template.parts) if not isinstance(p, str)), None)
    fixed = "".join(p for p in template.parts[:first] if isinstance(p, str))
    if first is None:
        fixed += "/"  # no placeholder: the URL may end right after the host
    if not _FIXED_ORIGIN.match(fixed):
        raise RequestTemplateError(
            f"{where}: {_without_secrets(template.text)!r} must start with http:// or https://"
            " and a host written out (placeholders may only follow in the path or query)"
        )
    return TextTemplate(template.text, template.parts, _quote_all, _no_dot_segment)


def _without_secrets(url: str) -> str:
    """``url`` for an error message: a password or token in its userinfo or query is
    the config's secret, not something to print."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url.split("?", 1)[0]
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rsplit("@", 1)[1]
    shown = f"{scheme}://{authority}{slash}{path}"
    return shown.split("?", 1)[0] + ("?***" if "?" in shown else "")


# Values that would be a dot segment (RFC 3986, 5.2.4) if they make up a path segment.
_DOT_SEGMENTS = frozenset({".", ".."})


def _quote_all(value: str) -> str:
    # safe="": a value cannot add path segments, a query or a fragment.
    if value in _DOT_SEGMENTS:
        raise RenderError(f"{value!r} would be a dot segment in the URL")
    return quote(value, safe="")


def _no_dot_segment(url: str) -> None:
    # Values next to each other, or to a literal dot, may assemble one where no single
    # value is one ("{a}.{b}" with both empty): the server would resolve it away.
    path = url.split("?", 1)[0].split("#", 1)[0]
    authority_end = path.find("/", path.find("://") + 3) if "://" in path else 0
    if authority_end < 0:
        return
    if any(segment in _DOT_SEGMENTS for segment in path[authority_end:].split("/")):
        raise RenderError("the URL would hold a dot segment ('.' or '..') in its path")


# --- body templates -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Literal:
    value: Any


@dataclass(frozen=True, slots=True)
class _Whole:
    placeholder: Placeholder


@dataclass(frozen=True, slots=True)
class _Object:
    items: tuple[tuple[str, _Node], ...]


@dataclass(frozen=True, slots=True)
class _List:
    items: tuple[_Node, ...]


_Node = _Literal | _Whole | TextTemplate | _Object | _List


@dataclass(frozen=True, slots=True)
class BodyTemplate:
    """A compiled JSON body template; ``render`` returns plain JSON values."""

    root: _Node

    def render(self, context: Mapping[str, Any]) -> Any:
        return _render_node(self.root, context)


def compile_body(spec: Any, where: str) -> BodyTemplate:
    return BodyTemplate(_compile_node(spec, where))


def _compile_node(spec: Any, where: str) -> _Node:
    if isinstance(spec, str):
        template = compile_text(spec, where)
        if not any(isinstance(p, Placeholder) for p in template.parts):
            return _Literal("".join(p for p in template.parts if isinstance(p, str)))
        if len(template.parts) == 1:
            only = template.parts[0]
            assert isinstance(only, Placeholder)
            return _Whole(only)
        return template
    if isinstance(spec, Mapping):
        items = []
        for key, value in spec.items():
            if not isinstance(key, str):
                raise RequestTemplateError(
                    f"{where}: object keys must be strings, not {key!r} (quote it in YAML)"
                )
            items.append((key, _compile_node(value, f"{where}.{key}")))
        node: _Node = _Object(tuple(items))
    elif isinstance(spec, list | tuple):
        node = _List(tuple(_compile_node(v, f"{where}.{i}") for i, v in enumerate(spec)))
    elif spec is None or isinstance(spec, bool | int):
        return _Literal(spec)
    elif isinstance(spec, float):
        if not math.isfinite(spec):
            raise RequestTemplateError(f"{where}: {spec} is not a JSON number")
        return _Literal(spec)
    else:
        raise RequestTemplateError(f"{where}: {type(spec).__name__} is not a JSON value")
    # A subtree without placeholders is rendered once, here.
    if _is_constant(node):
        return _Literal(_render_node(node, {}))
    return node


def _is_constant(node: _Node) -> bool:
    if isinstance(node, _Literal):
        return True
    if isinstance(node, _Object):
        return all(_is_constant(v) for _k, v in node.items)
    if isinstance(node, _List):
        return all(_is_constant(v) for v in node.items)
    return False


def _render_node(node: _Node, context: Mapping[str, Any]) -> Any:
    if isinstance(node, _Literal):
        return node.value
    if isinstance(node, _Whole):
        return _lookup(node.placeholder, context, null_ok=True)
    if isinstance(node, TextTemplate):
        return node.render(context)
    if isinstance(node, _Object):
        return {k: _render_node(v, context) for k, v in node.items}
    return [_render_node(v, context) for v in node.items]


# --- looking values up --------------------------------------------------------


def _lookup(placeholder: Placeholder, context: Mapping[str, Any], null_ok: bool = False) -> Any:
    path = placeholder.path
    try:
        return find_value(path, context)
    except PathError as exc:
        if exc.problem == "null" and exc.depth == len(path) - 1:
            if null_ok:
                return None
            raise RenderError(f"{placeholder.text} is missing (it is null)") from None
        if exc.problem == "not_an_index":
            walked = ".".join(path[: exc.depth])
            raise RenderError(f"{walked} is a list; {path[exc.depth]!r} is not an index") from None
        # Absent, null on the way, or a scalar walked into: all the same to a request.
        raise RenderError(f"{placeholder.text} is missing") from None


def _as_text(placeholder: Placeholder, value: Any) -> str:
    text = scalar_text(value)
    if text is not None:
        return text
    kind = "an object" if isinstance(value, Mapping) else "a list"
    raise RenderError(
        f"{placeholder.text} is {kind}; only strings, numbers and booleans fit in text"
        " (a body string that is only this placeholder keeps its JSON value)"
    )
