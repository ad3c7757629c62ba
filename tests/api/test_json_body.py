"""The API's JSON parser on its own: what it refuses and the field it names."""

from __future__ import annotations

import json

import pytest

from hipq.api.json_body import MAX_DEPTH, JSONRefused, loads


def refused(raw: str, where: str = "") -> JSONRefused:
    with pytest.raises(JSONRefused) as caught:
        loads(raw, where)
    return caught.value


def test_ordinary_json_is_decoded_as_written() -> None:
    raw = '{"a": [1, -2, 3.5, "x", true, null, {"b": 9223372036854775807}], "c": "\\ud83d\\ude00"}'
    assert loads(raw.encode()) == json.loads(raw)


def test_a_duplicate_key_is_named_where_it_is() -> None:
    error = refused('{"a": [{"ok": 1}, {"b": {"k": 1, "k": 2}}]}', "body")
    assert (error.field, error.message) == ("body.a[1].b.k", "duplicate key in a JSON object")


def test_the_deep_path_is_the_same_below_and_above_the_recursion_limit() -> None:
    # 300 levels are parsed and walked; 5,000 exhaust the parser and are scanned instead.
    fields = set()
    for depth in (300, 5_000):
        deep = "[" * depth + "]" * depth
        fields.add(refused(f'{{"a": [0, {{"b\\"": {deep}}}]}}').field)
    assert len(fields) == 1
    (field,) = fields
    assert field.startswith('a[1].b"') and field.count("[0]") == MAX_DEPTH - 2


@pytest.mark.parametrize("raw", ['{"n": NaN}', '{"n": 1e999}', '"\\udc00"', b'"\xff"', "[1,"])
def test_what_orjson_refused_is_still_invalid_json(raw: str | bytes) -> None:
    with pytest.raises(json.JSONDecodeError):
        loads(raw)


def test_integers_are_kept_exactly_within_64_bits_and_refused_beyond() -> None:
    assert loads(f"[{2**63 - 1}, {-(2**63)}]") == [2**63 - 1, -(2**63)]
    assert refused(f'{{"n": [{2**63}]}}').field == "n[0]"
