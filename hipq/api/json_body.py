"""JSON request bodies as hipq accepts them: one parser for every route.

The standard library's decoder is used rather than orjson because it can see what
orjson hides: a key given twice (orjson keeps the last one silently) and integers
beyond 64 bits (orjson turns them into floats). Both are refused, as are NaN,
Infinity, numbers too large for a float, and nesting deeper than ``MAX_DEPTH``
(orjson, which stores the jobs, writes at most 254 levels). A refusal names the
field at fault, as a path into the body.

Bodies over ``OFF_LOOP_BYTES`` are parsed and validated in a worker thread, at
most ``_BIG_BODIES`` at a time, so that a large request neither blocks the event
loop (its ticks, lease renewals, other requests) nor, with others, takes all memory.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import orjson
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from hipq.api.direct_calls import direct_call
from hipq.api.errors import InvalidParameter

__all__ = [
    "MAX_DEPTH",
    "OFF_LOOP_BYTES",
    "JSONBodyRoute",
    "JSONRefused",
    "check",
    "loads",
    "off_loop",
]

# Levels of arrays and objects; a job's payload is rarely more than a few deep.
MAX_DEPTH = 64
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
OFF_LOOP_BYTES = 256 * 1024
# Big bodies parsed at once: each takes several times its size in memory, and two
# threads of Python work would compete with the event loop for the interpreter.
_BIG_BODIES = anyio.CapacityLimiter(1)

_SURROGATE = re.compile(r"\\[uU][dD][89a-fA-F]")

T = TypeVar("T")


class JSONRefused(InvalidParameter):
    """Valid JSON that hipq refuses (a 422); ``field`` is the path of the part at fault."""


class _Duplicate(Exception):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _Duplicate
    return obj


def _constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not allowed", name, 0)


# One decoder for every call: json.loads builds a new one per call when given hooks.
_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_constant=_constant)


def loads(raw: bytes | str, where: str = "") -> Any:
    """``raw`` decoded; ``json.JSONDecodeError`` if it is not JSON, :class:`JSONRefused`
    if it is JSON that hipq refuses. ``where`` prefixes the fields named (e.g. ``body``)."""
    if isinstance(raw, bytes):
        try:
            # UTF-8 only, as JSON over HTTP is (json.loads would guess UTF-16 or 32 too).
            raw = raw.decode()
        except UnicodeDecodeError as exc:
            raise json.JSONDecodeError("not UTF-8", "", exc.start) from None
    try:
        value = _DECODER.decode(raw)
    except _Duplicate:
        raise _duplicate_found(raw, where) from None
    except RecursionError:
        raise JSONRefused(_deep_path(raw, where), _too_deep()) from None
    # Always walked: on a small body the walk costs less than a search of the text
    # for long numbers would.
    check(value, where)
    if _SURROGATE.search(raw):
        try:  # a pair is decoded into one character; a lone half cannot be stored
            orjson.dumps(value)
        except orjson.JSONEncodeError:
            raise json.JSONDecodeError("a lone surrogate is not text", "", 0) from None
    return value


def check(value: Any, where: str = "") -> None:
    """Refuse nesting deeper than ``MAX_DEPTH`` and integers outside 64 bits (floats that
    overflow are invalid JSON), iteratively: a recursive walk fails on the very inputs
    it must refuse."""
    if type(value) is int and not _INT_MIN <= value <= _INT_MAX:  # the whole body
        raise JSONRefused(where or "body", "an integer must fit in 64 bits (signed)")
    if type(value) is float and math.isinf(value):
        raise json.JSONDecodeError("number out of range", "", 0)
    if not isinstance(value, dict | list):
        return
    stack: list[tuple[Any, int, str]] = [(value, 0, where)]
    while stack:
        node, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            raise JSONRefused(path or "body", _too_deep())
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            kind = type(item)
            if kind is int:
                if not _INT_MIN <= item <= _INT_MAX:
                    raise JSONRefused(_join(path, key), "an integer must fit in 64 bits (signed)")
            elif kind is float:
                if math.isinf(item):  # orjson refused these as invalid JSON: still so
                    raise json.JSONDecodeError("number out of range", "", 0)
            elif kind is dict or kind is list:
                stack.append((item, depth + 1, _join(path, key)))


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _too_deep() -> str:
    return f"JSON nested more than {MAX_DEPTH} levels deep"


# What the path of a container depends on: strings (keys), brackets and separators.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')


def _deep_path(raw: str, where: str) -> str:
    """The path of the first container nested past ``MAX_DEPTH`` in text too deep for
    the parser, found by scanning the tokens with a stack of [key or index]."""
    stack: list[list[Any]] = []  # per open container: [is_object, key or index]
    pending = ""
    for match in _TOKEN.finditer(raw):
        token = match.group()
        if token in ("[", "{"):
            if len(stack) > MAX_DEPTH:
                path = where
                for _, key in stack:
                    path = _join(path, key)
                return path or "body"
            stack.append([token == "{", "" if token == "{" else 0])
        elif token in ("]", "}"):
            if stack:
                stack.pop()
        elif token == ",":
            if stack and not stack[-1][0]:
                stack[-1][1] += 1
        elif token == ":":
            if stack and stack[-1][0]:
                stack[-1][1] = json.loads(pending)
        else:
            pending = token
    return where or "body"


class _Keys(dict[str, Any]):
    duplicate: str | None = None


def _keys(pairs: list[tuple[str, Any]]) -> _Keys:
    obj = _Keys(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        obj.duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    return obj


def _duplicate_found(raw: str, where: str) -> JSONRefused:
    # Rare: parse again keeping the duplicates marked, to name where the key is.
    stack: list[tuple[Any, str]] = [(json.loads(raw, object_pairs_hook=_keys), where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, _Keys) and node.duplicate is not None:
            return JSONRefused(_join(path, node.duplicate), "duplicate key in a JSON object")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        stack.extend((item, _join(path, k)) for k, item in items if isinstance(item, dict | list))
    return JSONRefused(where or "body", "duplicate key in a JSON object")


async def off_loop(size: int, work: Callable[[], T]) -> T:
    """``work()``, in a worker thread when the body is ``size`` bytes over the threshold."""
    if size <= OFF_LOOP_BYTES:
        return work()
    async with _BIG_BODIES:
        return await anyio.to_thread.run_sync(work)


def _is_json(content_type: str | None) -> bool:
    kind = (content_type or "").partition(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind[-5:] == "+json")


def _invalid_json(exc: json.JSONDecodeError) -> RequestValidationError:
    # The error FastAPI itself raises for a body that is not JSON.
    error = {
        "type": "json_invalid",
        "loc": ("body", exc.pos),
        "msg": "JSON decode error",
        "input": {},
        "ctx": {"error": exc.msg},
    }
    return RequestValidationError([error], body=exc.doc)


class JSONBodyRoute(APIRoute):
    """A route whose JSON body is decoded by :func:`loads` before FastAPI sees it.

    A big body is also validated against the route's body model in the worker thread;
    FastAPI then receives the model instance, which it passes through without
    validating it again. A JSON body that the route's parameters accept as they are
    goes to the endpoint directly (``hipq.api.direct_calls``).
    """

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()
        field = self.body_field
        direct = direct_call(self)  # built in the same inclusion as ``handler``

        def parse(raw: bytes) -> Any:
            try:
                value = loads(raw)
            except json.JSONDecodeError as exc:
                raise _invalid_json(exc) from None
            if field is None or len(raw) <= OFF_LOOP_BYTES:
                return value
            validated, errors = field.validate(value, {}, loc=("body",))
            if errors:
                raise RequestValidationError(errors, body=value)
            return validated

        async def parsed_handler(request: Request) -> Response:
            if field is not None and _is_json(request.headers.get("content-type")):
                raw = await request.body()
                if raw:
                    # Starlette's own cache of the decoded body, read by FastAPI.
                    body = request._json = await off_loop(len(raw), lambda: parse(raw))
                    answer = None if direct is None else await direct(request, body)
                    if answer is not None:
                        return answer
            return await handler(request)

        return parsed_handler
