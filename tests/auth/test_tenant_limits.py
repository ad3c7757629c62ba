"""What a tenant's token may set on its jobs beyond their queue and type: notification
targets, labels, priority, critical, and what spends shared capacity (weight, timeout,
retry, a past run_at): its job limits; and whose Idempotency-Keys it shares (nobody's)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from hipq.security.tokens import TokenConfigError, Tokens, config_line, new_token, parse_line
from tests.api.conftest import Api, open_api

OK = {"python": {"handler": "tests.handlers:ok"}}
TYPES = {"echo": {"transport": OK, "notify": ["own"], "priority": 100}}
TARGETS = {
    name: {"webhook": {"url": f"http://127.0.0.1:9/{name}"}} for name in ("own", "extra", "theirs")
}
TOKENS = {
    # Restricted, with the defaults of a restricted token.
    "acme": ["queue=default", "type=echo"],
    "beta": ["queue=default"],
    # Restricted, with limits of its own.
    "gamma": [
        "queue=default",
        "notify=extra",
        "labels=region:east,tier",
        "priority=50..150",
        "critical=yes",
    ],
    # Restricted, its capacity bounds widened.
    "delta": [
        "queue=default",
        "weight=4",
        "timeout=any",
        "attempts=50",
        "retry_delay=0.5s",
        "run_at=past",
    ],
    # Not restricted: unbounded unless its line says otherwise.
    "ops": [],
}


@pytest.fixture
async def limited(database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Api, dict[str, str]]]:
    secrets = {name: new_token() for name in TOKENS}
    lines = [config_line(n, ["submit"], secrets[n], limits=TOKENS[n]) for n in TOKENS]
    (tmp_path / "tokens").write_text("\n".join(lines) + "\n")
    async with open_api(
        database_url,
        auth={"tokens_file": str(tmp_path / "tokens")},
        job_types=TYPES,
        notifications={"targets": TARGETS},
    ) as api:
        yield api, secrets


async def _post(api: Api, token: str, headers: dict[str, str] | None = None, **job: Any) -> Any:
    return await api.client.post(
        "/v1/jobs",
        json={"type": "echo", **job},
        headers={"Authorization": f"Bearer {token}", **(headers or {})},
    )


def _forbidden(answer: Any, field: str) -> None:
    assert answer.status_code == 403, answer.text
    assert answer.json()["field"] == field, answer.text


async def test_a_restricted_token_keeps_to_its_own_by_default(
    limited: tuple[Api, dict[str, str]],
) -> None:
    api, secrets = limited
    acme = secrets["acme"]
    _forbidden(await _post(api, acme, notify=["theirs"]), "notify")
    _forbidden(await _post(api, acme, notify=["own", "theirs"]), "notify")
    _forbidden(await _post(api, acme, notify=[]), "notify")  # silencing its type's target
    _forbidden(await _post(api, acme, labels={"region": "east"}), "labels.region")
    _forbidden(await _post(api, acme, priority=1), "priority")
    _forbidden(await _post(api, acme, critical=True), "critical")
    batch = {"jobs": [{"type": "echo"}, {"type": "echo", "critical": True}]}
    refused = await api.client.post(
        "/v1/jobs/batch", json=batch, headers={"Authorization": f"Bearer {acme}"}
    )
    _forbidden(refused, "jobs[1].critical")
    assert await api.count_jobs() == 0
    for fine in ({}, {"notify": ["own"]}, {"priority": 100}, {"priority": 500}):
        made = await _post(api, acme, **fine)
        assert made.status_code == 201, (fine, made.text)
    assert await api.count_jobs() == 4


async def test_a_token_line_says_what_more_its_jobs_may_set(
    limited: tuple[Api, dict[str, str]],
) -> None:
    api, secrets = limited
    gamma = secrets["gamma"]
    allowed: list[dict[str, Any]] = [
        {"notify": ["own", "extra"]},
        {"labels": {"region": "east", "tier": "gold"}},
        {"priority": 50},
        {"priority": 150},
        {"critical": True},
    ]
    for fine in allowed:
        made = await _post(api, gamma, **fine)
        assert made.status_code == 201, (fine, made.text)
    _forbidden(await _post(api, gamma, notify=["own", "theirs"]), "notify")
    _forbidden(await _post(api, gamma, notify=["extra"]), "notify")
    _forbidden(await _post(api, gamma, labels={"region": "west"}), "labels.region")
    _forbidden(await _post(api, gamma, labels={"zone": "a"}), "labels.zone")
    _forbidden(await _post(api, gamma, priority=49), "priority")
    _forbidden(await _post(api, gamma, priority=151), "priority")
    assert await api.count_jobs() == len(allowed)


async def test_an_unrestricted_token_sets_what_it_likes(
    limited: tuple[Api, dict[str, str]],
) -> None:
    api, secrets = limited
    made = await _post(
        api, secrets["ops"], notify=[], labels={"region": "west"}, priority=1, critical=True
    )
    assert made.status_code == 201, made.text


async def test_idempotency_keys_are_per_token(limited: tuple[Api, dict[str, str]]) -> None:
    api, secrets = limited
    key = {"Idempotency-Key": "order-17"}
    first = await _post(api, secrets["acme"], key, payload={"card": "acme's"})
    assert first.status_code == 201, first.text
    # Another tenant replaying the key and body gets a job of its own, not acme's.
    other = await _post(api, secrets["beta"], key, payload={"card": "acme's"})
    assert other.status_code == 201, other.text
    assert other.json()["id"] != first.json()["id"]
    # ... and learns nothing from a different body either (no 409 on acme's key).
    assert (await _post(api, secrets["beta"], key, payload={"x": 1})).status_code == 409
    again = await _post(api, secrets["acme"], key, payload={"card": "acme's"})
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert await api.count_jobs() == 2


async def test_a_restricted_token_spends_no_more_than_its_job_type_gives(
    limited: tuple[Api, dict[str, str]],
) -> None:
    api, secrets = limited
    acme = secrets["acme"]
    # The type: weight 1, timeout 24h, exponential retry (25 attempts, from 0.9s).
    _forbidden(await _post(api, acme, weight=2), "weight")
    _forbidden(await _post(api, acme, timeout="3650d"), "timeout")
    _forbidden(await _post(api, acme, retry={"max_attempts": 10000}), "retry.max_attempts")
    _forbidden(await _post(api, acme, retry={"strategy": "fixed", "delay": 0}), "retry")
    assert await api.count_jobs() == 0
    for fine in (
        {"weight": 1},
        {"timeout": "1h"},
        {"retry": {"max_attempts": 3}},
        {"retry": {"strategy": "fixed", "delay": "10s", "max_attempts": 5}},
        {"retry": {"strategy": "none"}},
    ):
        made = await _post(api, acme, **fine)
        assert made.status_code == 201, (fine, made.text)
    # A run_at in the past is taken as now: it goes after the jobs added before it.
    early = await _post(api, acme, run_at="2000-01-01T00:00:00Z")
    assert early.status_code == 201, early.text
    assert datetime.fromisoformat(early.json()["run_at"]) == api.clock()


async def test_a_token_line_widens_its_capacity_bounds(
    limited: tuple[Api, dict[str, str]],
) -> None:
    api, secrets = limited
    delta, ops = secrets["delta"], secrets["ops"]
    _forbidden(await _post(api, delta, weight=5), "weight")
    _forbidden(await _post(api, delta, retry={"max_attempts": 51}), "retry.max_attempts")
    _forbidden(await _post(api, delta, retry={"strategy": "fixed", "delay": 0.1}), "retry")
    for token in (delta, ops):
        made = await _post(
            api,
            token,
            weight=4,
            timeout="3650d",
            retry={"strategy": "fixed", "delay": "1s", "max_attempts": 50},
            run_at="2000-01-01T00:00:00Z",
        )
        assert made.status_code == 201, made.text
        assert made.json()["run_at"].startswith("2000-01-01")


@pytest.mark.parametrize(
    ("limit", "says"),
    [
        ("priority=high", "MIN..MAX"),
        ("priority=9..1", "MIN is above MAX"),
        ("priority=..", "MIN..MAX"),
        ("critical=maybe", "yes or no"),
        ("labels=:x", "NAME or NAME:VALUE"),
        ("colour=red", "job limit"),
        ("weight=0", "a whole number"),
        ("timeout=soon", "a duration"),
        ("run_at=later", "past"),
    ],
)
def test_a_bad_limit_stops_the_start(limit: str, says: str) -> None:
    with pytest.raises(TokenConfigError, match=says):
        parse_line(f"acme submit queue=default {limit} {new_token()}", "tokens:1")


def test_an_unknown_target_in_a_limit_stops_the_start() -> None:
    principal = parse_line(f"acme submit notify=nope {new_token()}", "tokens:1")
    with pytest.raises(TokenConfigError, match="unknown notify 'nope'"):
        Tokens([principal]).check_restrictions(["default"], ["echo"], ["own"])
