from datetime import UTC, datetime

import pytest

from hipq.jobs import Job
from hipq.templates import JOB_ROOTS
from hipq.transports.rendering import (
    REQUEST_ROOTS,
    RenderError,
    RequestTemplateError,
    compile_body,
    compile_text,
    compile_url,
    job_context,
)
from tests.factories import make_job

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def charge_job(**changes: object) -> Job:
    fields: dict = dict(
        id=42,
        type="charge",
        payload={
            "order_id": "A/17?x",
            "amount": 1200,
            "items": [{"sku": "s1"}],
            "note": None,
            "express": True,
            "rate": 1.5,
        },
        labels={"region": "east"},
        timeout_seconds=30.0,
        attempt=3,
        correlation_key="A-17:3",
        claimed_at=None,
    )
    fields.update(changes)
    return make_job(**fields)


CTX = job_context(charge_job())


def test_body_string_that_is_one_placeholder_keeps_the_json_type() -> None:
    body = compile_body(
        {
            "items": "{payload.items}",
            "amount": "{payload.amount}",
            "express": "{payload.express}",
            "note": "{payload.note}",
            "attempt": "{attempt}",
            "id": "{id}",
        },
        "body",
    )
    assert body.render(CTX) == {
        "items": [{"sku": "s1"}],
        "amount": 1200,
        "express": True,
        "note": None,
        "attempt": 3,
        "id": 42,
    }


def test_body_strings_with_text_around_placeholders_render_as_text() -> None:
    body = compile_body(
        {
            "ref": "order {payload.order_id} x{payload.amount}",
            "nested": [{"r": "{labels.region}!"}],
            "flag": "{payload.express} / {payload.rate}",
        },
        "body",
    )
    assert body.render(CTX) == {
        "ref": "order A/17?x x1200",
        "nested": [{"r": "east!"}],
        "flag": "true / 1.5",
    }


def test_body_literals_and_escaped_braces_pass_through() -> None:
    spec = {
        "kind": "charge",
        "n": 3,
        "f": 0.5,
        "none": None,
        "yes": False,
        "empty": "",
        "braces": "{{not a placeholder}}",
        "list": [1, "two"],
    }
    rendered = compile_body(spec, "body").render(CTX)
    assert rendered == {**spec, "braces": "{not a placeholder}"}


def test_body_may_be_a_single_placeholder_or_a_list() -> None:
    assert compile_body("{payload}", "body").render(CTX) == charge_job().payload
    assert compile_body(["{correlation_key}", "{type}"], "b").render(CTX) == ["A-17:3", "charge"]


def test_rendering_does_not_share_state_between_jobs() -> None:
    body = compile_body({"id": "{payload.order_id}", "fixed": {"a": [1]}}, "body")
    first = body.render(job_context(charge_job(payload={"order_id": "1"})))
    second = body.render(job_context(charge_job(payload={"order_id": "2"})))
    assert first["id"] == "1" and second["id"] == "2"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"x": "{payload.missing}"}, "payload.missing is missing"),
        ({"x": "a {payload.note}"}, "payload.note is missing (it is null)"),
        ({"x": "a {payload.items}"}, "payload.items is a list"),
        ({"x": "{payload.items.sku}"}, "payload.items is a list; 'sku' is not an index"),
        ({"x": "{payload.items.5.sku}"}, "payload.items.5.sku is missing"),
        ({"x": "{payload.note.deep}"}, "payload.note.deep is missing"),
    ],
)
def test_values_that_cannot_fill_the_template_are_render_errors(spec: object, message: str) -> None:
    with pytest.raises(RenderError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_body(spec, "body").render(CTX)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"x": {"y": "{paylod.order_id}"}}, "job_types.t.body.x.y: unknown placeholder"),
        ({"x": "{payload.a"}, "job_types.t.body.x: unclosed"),
        ({1: "a"}, "job_types.t.body: object keys must be strings"),
        ({"x": float("nan")}, "job_types.t.body.x: nan is not a JSON number"),
        ({"x": object()}, "job_types.t.body.x: object is not a JSON value"),
    ],
)
def test_bad_body_templates_fail_at_compile_naming_the_key(spec: object, message: str) -> None:
    with pytest.raises(RequestTemplateError, match=message):
        compile_body(spec, "job_types.t.body")


def test_url_values_are_percent_encoded_so_a_payload_cannot_change_the_path() -> None:
    url = compile_url("https://pay.internal/charges/{payload.order_id}?a={attempt}", "url")
    assert url.render(CTX) == "https://pay.internal/charges/A%2F17%3Fx?a=3"


@pytest.mark.parametrize(
    "text",
    [
        "{payload.base}/charges",
        "http://{payload.host}/charges",
        "http://pay{payload.env}.internal/x",
        "ftp://pay.internal/x",
        "pay.internal/x",
        "",
    ],
)
def test_url_destination_must_be_written_out_in_the_config(text: str) -> None:
    with pytest.raises(RequestTemplateError, match=r"job_types\.t\.url: .*must start with http"):
        compile_url(text, "job_types.t.url")


def test_url_without_placeholders_and_with_port_is_fine() -> None:
    assert compile_url("http://127.0.0.1:8080", "u").render(CTX) == "http://127.0.0.1:8080"
    assert compile_url("HTTPS://h:1/{id}", "u").render(CTX) == "HTTPS://h:1/42"


def test_text_templates_render_headers() -> None:
    header = compile_text("Bearer {labels.region}-{correlation_key}", "h")
    assert header.render(CTX) == "Bearer east-A-17:3"
    assert compile_text("", "h").render(CTX) == ""
    with pytest.raises(RequestTemplateError, match="h: must be a string"):
        compile_text(5, "h")


def test_correlation_key_missing_is_a_render_error() -> None:
    ctx = job_context(charge_job(correlation_key=None))
    with pytest.raises(RenderError, match="correlation_key is missing"):
        compile_text("{correlation_key}", "h").render(ctx)


@pytest.mark.parametrize(
    ("url", "payload"),
    [
        ("http://x.test/a/{payload.a}.{payload.b}/c", {"a": "", "b": ""}),
        ("http://x.test/a/{payload.a}{payload.b}/c", {"a": ".", "b": "."}),
        ("http://x.test/{payload.a}{payload.b}", {"a": "", "b": "."}),
        ("http://x.test/a/.{payload.a}?q=1", {"a": ""}),
    ],
)
def test_values_that_assemble_a_dot_segment_are_refused(url: str, payload: dict) -> None:
    template = compile_url(url, "url")
    with pytest.raises(RenderError, match="dot segment"):
        template.render(job_context(charge_job(payload=payload)))


def test_dots_inside_a_segment_or_in_the_query_are_kept() -> None:
    template = compile_url("http://x.test/{payload.a}.{payload.b}?q={payload.a}", "url")
    rendered = template.render(job_context(charge_job(payload={"a": "v1", "b": "json"})))
    assert rendered == "http://x.test/v1.json?q=v1"


@pytest.mark.parametrize("value", ["Bearer s3cr3t-t0ken{", "Bearer s3cr3t-t0ken{payload.}"])
def test_a_header_templates_error_does_not_repeat_its_value(value: str) -> None:
    with pytest.raises(RequestTemplateError) as caught:
        compile_text(value, "job_types.x.transport.http.headers.Authorization", secret=True)
    assert "s3cr3t" not in str(caught.value)
    assert str(caught.value).startswith("job_types.x.transport.http.headers.Authorization: ")


def test_a_url_templates_error_does_not_repeat_its_password() -> None:
    with pytest.raises(RequestTemplateError) as caught:
        compile_url("http://user:s3cr3t@x.test/a/{payload.a", "url")
    assert "s3cr3t" not in str(caught.value)


def test_a_request_template_reads_every_field_of_the_job_context() -> None:
    # The roots a request may name are the job context's keys, not a list of their own:
    # a field the context gains can be read by a request at once.
    job = charge_job()
    assert set(job_context(job)) == REQUEST_ROOTS
    assert JOB_ROOTS == REQUEST_ROOTS - {"correlation_key"}
    text = "/".join(f"{{{root}}}" for root in sorted(REQUEST_ROOTS - {"payload", "labels"}))
    template = compile_text(text + "/{payload.amount}/{labels.region}", "request.url")
    assert template.render(job_context(job)) == "3/A-17:3/42/charge/1200/east"
