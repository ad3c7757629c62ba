import pytest

from hipq.templates import (
    JOB_ROOTS,
    KAFKA_RESPONSE_ROOTS,
    KeyTemplate,
    TemplateError,
    compile_template,
    kafka_headers,
)

ROOTS = frozenset({"payload", "attempt", "id", "type", "labels"})


def render(text: str, context: dict, roots: frozenset[str] = ROOTS) -> str:
    return compile_template(text, roots).render(context)


# --- compiling -------------------------------------------------------------


def test_compiles_and_lists_placeholders_in_order_without_duplicates() -> None:
    t = compile_template("{payload.order_id}:{attempt}:{payload.order_id}", ROOTS)
    assert isinstance(t, KeyTemplate)
    assert t.placeholders == ("payload.order_id", "attempt")
    assert t.roots == frozenset({"payload", "attempt"})
    assert str(t) == "{payload.order_id}:{attempt}:{payload.order_id}"


def test_default_root_sets_cover_the_documented_templates() -> None:
    assert JOB_ROOTS == ROOTS
    for text in ("{key}", "{headers.correlation_id}", "{value.order_id}:{value.request_id}"):
        compile_template(text, KAFKA_RESPONSE_ROOTS)


def test_unknown_root_names_the_placeholder() -> None:
    with pytest.raises(TemplateError, match=r"\{foo\.x\}") as info:
        compile_template("{payload.a}-{foo.x}", ROOTS)
    assert info.value.placeholder == "foo.x"
    assert isinstance(info.value, ValueError)


def test_a_misspelt_root_fails_at_compile_time() -> None:
    with pytest.raises(TemplateError, match="paylod"):
        compile_template("{paylod.order_id}", ROOTS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{payload.order_id", "unclosed"),
        ("payload.order_id}", "unmatched"),
        ("a}b", "unmatched"),
        ("{payload.{x}}", "inside a placeholder"),
        ("{}", "empty placeholder"),
        ("x{ }y", "empty placeholder"),
        ("{payload..x}", "empty path part"),
        ("{payload.}", "empty path part"),
        ("{.payload}", "empty path part"),
        ("{ payload.x}", "spaces"),
        ("{payload.items[0]}", "brackets"),
        ("", "empty"),
    ],
)
def test_malformed_templates_are_refused(text: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        compile_template(text, ROOTS)


def test_non_string_template_is_refused() -> None:
    with pytest.raises(TemplateError, match="must be a string"):
        compile_template(42, ROOTS)  # type: ignore[arg-type]


def test_empty_root_set_allows_no_placeholder() -> None:
    with pytest.raises(TemplateError, match=r"\(none\)"):
        compile_template("{payload.x}", frozenset())
    assert compile_template("fixed", frozenset()).render({}) == "fixed"


def test_doubled_braces_are_literal_braces() -> None:
    t = compile_template("{{{payload.id}}}-{{x}}", ROOTS)
    assert t.placeholders == ("payload.id",)
    assert t.render({"payload": {"id": "A"}}) == "{A}-{x}"


def test_doubled_braces_around_a_name_are_not_a_placeholder() -> None:
    t = compile_template("{{payload.id}}", ROOTS)
    assert t.placeholders == ()
    assert t.render({}) == "{payload.id}"


# --- rendering -------------------------------------------------------------


def test_renders_the_design_examples() -> None:
    ctx = {"payload": {"order_id": "A-17", "amount": 1200}, "attempt": 3}
    assert render("{payload.order_id}", ctx) == "A-17"
    assert render("{payload.order_id}:{attempt}", ctx) == "A-17:3"
    kafka = {
        "key": b"k-1",
        "value": {"order_id": "A-17", "request_id": 9},
        "headers": {"correlation_id": b"corr-5"},
    }
    assert render("{value.order_id}:{value.request_id}", kafka, KAFKA_RESPONSE_ROOTS) == "A-17:9"
    assert render("{headers.correlation_id}", kafka, KAFKA_RESPONSE_ROOTS) == "corr-5"
    assert render("{key}", kafka, KAFKA_RESPONSE_ROOTS) == "k-1"


def test_walks_nested_objects_and_list_indexes() -> None:
    ctx = {"payload": {"customer": {"id": "c1"}, "items": [{"sku": "s0"}, {"sku": "s1"}]}}
    assert render("{payload.customer.id}/{payload.items.1.sku}", ctx) == "c1/s1"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("text", "text"),
        ("", ""),
        (17, "17"),
        (-3, "-3"),
        (17.0, "17"),
        (1.5, "1.5"),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (b"bytes", "bytes"),
        ("é✓".encode(), "é✓"),
    ],
)
def test_scalar_values_render_as_json_would_write_them(value: object, expected: str) -> None:
    assert render("k:{payload.v}", {"payload": {"v": value}}) == "k:" + expected


def test_false_and_zero_are_values_not_missing() -> None:
    assert render("{payload.a}{payload.b}", {"payload": {"a": False, "b": 0}}) == "false0"


def test_absent_value_is_missing() -> None:
    with pytest.raises(TemplateError, match=r"^payload\.order_id is missing$") as info:
        render("{payload.order_id}", {"payload": {}})
    assert info.value.placeholder == "payload.order_id"


def test_null_value_is_missing() -> None:
    with pytest.raises(TemplateError, match=r"payload\.order_id is missing"):
        render("{payload.order_id}", {"payload": {"order_id": None}})


def test_absent_parent_and_absent_root_are_missing() -> None:
    with pytest.raises(TemplateError, match=r"payload\.customer\.id is missing"):
        render("{payload.customer.id}", {"payload": {"customer": None}})
    with pytest.raises(TemplateError, match=r"payload\.customer\.id is missing"):
        render("{payload.customer.id}", {})


def test_list_index_out_of_range_is_missing() -> None:
    with pytest.raises(TemplateError, match=r"payload\.items\.5 is missing"):
        render("{payload.items.5}", {"payload": {"items": [1]}})


def test_non_numeric_part_on_a_list_is_refused() -> None:
    with pytest.raises(TemplateError, match="is a list"):
        render("{payload.items.first}", {"payload": {"items": [1]}})


def test_negative_index_is_not_an_index() -> None:
    with pytest.raises(TemplateError, match="not an index"):
        render("{payload.items.-1}", {"payload": {"items": [1]}})


def test_walking_into_a_scalar_is_refused() -> None:
    with pytest.raises(TemplateError, match=r"payload\.order_id is a string; it has no 'x'"):
        render("{payload.order_id.x}", {"payload": {"order_id": "A"}})


@pytest.mark.parametrize(
    ("value", "kind"),
    [({"a": 1}, "an object"), ([1, 2], "a list"), (object(), "a object")],
)
def test_objects_and_lists_are_refused(value: object, kind: str) -> None:
    with pytest.raises(TemplateError, match=f"payload.v is {kind}; only strings"):
        render("{payload.v}", {"payload": {"v": value}})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_refused(value: float) -> None:
    with pytest.raises(TemplateError, match="cannot be part of a key"):
        render("{payload.v}", {"payload": {"v": value}})


def test_invalid_utf8_bytes_are_refused() -> None:
    with pytest.raises(TemplateError, match="not valid UTF-8"):
        render("{headers.c}", {"headers": {"c": b"\xff\xfe"}}, KAFKA_RESPONSE_ROOTS)


def test_an_empty_result_is_refused() -> None:
    with pytest.raises(TemplateError, match="empty key"):
        render("{payload.v}", {"payload": {"v": ""}})


def test_kafka_header_pairs_become_a_mapping_last_wins() -> None:
    headers = kafka_headers(
        [("correlation_id", b"old"), ("other", None), ("correlation_id", b"new")]
    )
    assert headers == {"correlation_id": b"new", "other": None}
    assert render("{headers.correlation_id}", {"headers": headers}, KAFKA_RESPONSE_ROOTS) == "new"
    with pytest.raises(TemplateError, match=r"headers\.other is missing"):
        render("{headers.other}", {"headers": headers}, KAFKA_RESPONSE_ROOTS)


def test_rendering_does_not_depend_on_earlier_renders() -> None:
    t = compile_template("{payload.id}", ROOTS)
    assert t.render({"payload": {"id": 1}}) == "1"
    assert t.render({"payload": {"id": 2}}) == "2"
