import pytest

from hipq.outcome_rules import Judgement, OutcomeRule, OutcomeRuleError, decide

APPROVED = OutcomeRule.from_config({"field": "status", "success": ["ok", "approved"]})


# --- parsing ---------------------------------------------------------------


def test_default_rule_is_status_ok() -> None:
    assert OutcomeRule.from_config(None) == OutcomeRule()
    assert OutcomeRule() == OutcomeRule(field="status", success=("ok",), header=None)
    assert OutcomeRule.from_config({}) == OutcomeRule()


def test_parses_the_config_sketch() -> None:
    assert APPROVED == OutcomeRule(field="status", success=("ok", "approved"))
    assert isinstance(APPROVED.success, tuple)


def test_header_rule_does_not_also_use_the_default_field() -> None:
    rule = OutcomeRule.from_config({"header": "x-outcome", "success": ["ok"]})
    assert rule == OutcomeRule(field=None, success=("ok",), header="x-outcome")


def test_a_single_success_value_may_be_written_without_a_list() -> None:
    assert OutcomeRule.from_config({"success": "done"}).success == ("done",)


def test_accept_any_rule() -> None:
    rule = OutcomeRule.from_config({"field": None, "success": []})
    assert rule.accepts_any
    assert OutcomeRule.from_config({"field": None}) == rule
    assert not OutcomeRule().accepts_any


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"field": "status", "header": "x-outcome"}, "not both"),
        ({"field": "status", "success": []}, "at least one value"),
        ({"field": "status", "success": None}, "at least one value"),
        ({"field": None, "success": ["ok"]}, "need a field or a header"),
        ({"field": "result..status"}, "dotted name"),
        ({"field": ""}, "dotted name"),
        ({"field": 3}, "dotted name"),
        ({"header": ""}, "header name"),
        ({"success": [None]}, "strings, numbers or booleans"),
        ({"success": [["ok"]]}, "strings, numbers or booleans"),
        ({"success": {"ok": 1}}, "list of values"),
        ({"success": [float("nan")]}, "not a JSON number"),
        ({"feild": "status"}, "unknown outcome key 'feild'"),
        ("status", "must be a mapping"),
    ],
)
def test_bad_configs_are_refused(config: object, message: str) -> None:
    with pytest.raises(OutcomeRuleError, match=message) as info:
        OutcomeRule.from_config(config)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


# --- deciding: fields ------------------------------------------------------


def test_success_value() -> None:
    assert decide(APPROVED, {"status": "approved"}, {}) == Judgement(True, "status='approved'")


def test_other_value_fails_with_a_reason() -> None:
    outcome = decide(APPROVED, {"status": "declined"}, {})
    assert outcome == Judgement(False, "status='declined' is not one of ok, approved")


def test_comparison_is_case_sensitive() -> None:
    assert not decide(APPROVED, {"status": "OK"}, {}).succeeded


def test_missing_field_fails_with_a_reason() -> None:
    assert decide(APPROVED, {"state": "ok"}, {}) == Judgement(False, "field status missing")


def test_null_field_fails_and_shows_null() -> None:
    assert decide(APPROVED, {"status": None}, {}).reason == "status=null is not one of ok, approved"


def test_dotted_field() -> None:
    rule = OutcomeRule.from_config({"field": "result.status", "success": ["ok"]})
    assert decide(rule, {"result": {"status": "ok"}}, {}).succeeded
    assert decide(rule, {"result": {}}, {}).reason == "field result.status missing"
    assert decide(rule, {"result": "ok"}, {}).reason == "field result.status missing"
    assert decide(rule, {}, {}).reason == "field result.status missing"


def test_dotted_field_through_a_list_index() -> None:
    rule = OutcomeRule(field="results.0.status")
    assert decide(rule, {"results": [{"status": "ok"}]}, {}).succeeded
    assert not decide(rule, {"results": []}, {}).succeeded


def test_string_config_value_does_not_match_a_number() -> None:
    rule = OutcomeRule(field="code", success=("0",))
    assert not decide(rule, {"code": 0}, {}).succeeded
    assert decide(rule, {"code": "0"}, {}).succeeded


def test_number_config_value_matches_json_equal_numbers_only() -> None:
    rule = OutcomeRule.from_config({"field": "code", "success": [0, 200]})
    assert decide(rule, {"code": 200}, {}).succeeded
    assert decide(rule, {"code": 200.0}, {}).succeeded
    assert not decide(rule, {"code": "200"}, {}).succeeded
    assert not decide(rule, {"code": False}, {}).succeeded  # False == 0 in Python, not in JSON
    assert decide(rule, {"code": 500}, {}).reason == "code=500 is not one of 0, 200"


def test_boolean_config_value_matches_booleans_only() -> None:
    rule = OutcomeRule.from_config({"field": "paid", "success": [True]})
    assert decide(rule, {"paid": True}, {}).succeeded
    assert not decide(rule, {"paid": 1}, {}).succeeded
    assert not decide(rule, {"paid": "true"}, {}).succeeded
    assert decide(rule, {"paid": False}, {}).reason == "paid=false is not one of true"


def test_object_value_is_shown_short() -> None:
    reason = decide(OutcomeRule(), {"status": {"text": "x" * 200}}, {}).reason
    assert reason.startswith('status={"text":"xxx')
    assert len(reason) < 120


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (None, "field status missing (empty body)"),
        (b"", "field status missing (empty body)"),
        (b"<html>oops</html>", "field status missing (body is not JSON)"),
        ("not json", "field status missing (body is not JSON)"),
        ([1, 2], "field status missing (body is not a JSON object)"),
        (b'"ok"', "field status missing (body is not a JSON object)"),
        (42, "field status missing (body is not a JSON object)"),
    ],
)
def test_bodies_without_the_field(body: object, reason: str) -> None:
    assert decide(OutcomeRule(), body, {}) == Judgement(False, reason)


def test_raw_json_body_is_parsed() -> None:
    assert decide(OutcomeRule(), b'{"status": "ok"}', {}).succeeded
    assert decide(OutcomeRule(), '{"status": "ok"}').succeeded


# --- deciding: headers -----------------------------------------------------


def test_header_rule() -> None:
    rule = OutcomeRule.from_config({"header": "x-outcome", "success": ["ok"]})
    assert decide(rule, None, {"x-outcome": "ok"}) == Judgement(True, "header x-outcome='ok'")
    assert decide(rule, {"status": "ok"}, {"X-Outcome": "ok"}).succeeded  # case-insensitive name
    assert decide(rule, None, {"x-outcome": b"ok"}).succeeded  # Kafka header bytes
    assert decide(rule, None, {"x-outcome": "failed"}) == Judgement(
        False, "header x-outcome='failed' is not one of ok"
    )
    assert decide(rule, {"status": "ok"}, {}) == Judgement(False, "header x-outcome missing")


def test_header_compared_with_the_config_value_written_as_json() -> None:
    rule = OutcomeRule.from_config({"header": "x-code", "success": [200, True]})
    assert decide(rule, None, {"x-code": "200"}).succeeded
    assert decide(rule, None, {"x-code": "true"}).succeeded
    assert not decide(rule, None, {"x-code": "True"}).succeeded


# --- accepting everything --------------------------------------------------


@pytest.mark.parametrize("body", [None, {}, {"status": "declined"}, b"anything"])
def test_accept_any_rule_succeeds_for_every_response(body: object) -> None:
    rule = OutcomeRule.from_config({"field": None, "success": []})
    assert decide(rule, body, {}).succeeded
