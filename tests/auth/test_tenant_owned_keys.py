"""A tenant's keys are names within its tenant: another tenant's job key, ``unique_for``
period, Idempotency-Key or ``after`` reference answers exactly as an absent one, and a
key never reaches a job of another owner (docs/security.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hipq.security.tokens import config_line, new_token
from tests.api.conftest import Api, open_api

ECHO = {"transport": {"python": {"handler": "tests.handlers:ok"}}}
TOKENS = {
    "acme": (["queue=default"], None),
    # A second line of tenant acme (a rotation): the same jobs' keys.
    "acme-next": (["queue=default"], "acme"),
    "beta": (["queue=default"], None),
    # Not restricted: the service.
    "ops": ([], None),
}
ABSENT_ID = 987654321
SERVICE = ["submit", "read", "operate"]


@pytest.fixture
async def tenants(database_url: str, tmp_path: Path) -> AsyncIterator[tuple[Api, dict[str, str]]]:
    secrets = {name: new_token() for name in TOKENS}
    lines = [
        config_line(n, ["submit"] if q else SERVICE, secrets[n], queues=q and ["default"], tenant=t)
        for n, (q, t) in TOKENS.items()
    ]
    (tmp_path / "tokens").write_text("\n".join(lines) + "\n")
    async with open_api(
        database_url, auth={"tokens_file": str(tmp_path / "tokens")}, job_types={"echo": ECHO}
    ) as api:
        yield api, secrets


async def _post(api: Api, token: str, headers: dict[str, str] | None = None, **job: Any) -> Any:
    return await api.client.post(
        "/v1/jobs",
        json={"type": "echo", **job},
        headers={"Authorization": f"Bearer {token}", **(headers or {})},
    )


def _made(answer: Any) -> dict[str, Any]:
    assert answer.status_code == 201, answer.text
    return answer.json()


@pytest.mark.parametrize("mode", ["replace", "preserve_run_at", "unsafe_dedupe"])
async def test_another_tenants_job_key_is_an_absent_one(
    tenants: tuple[Api, dict[str, str]], mode: str
) -> None:
    api, secrets = tenants
    theirs = _made(
        await _post(api, secrets["beta"], job_key="K", payload={"who": "beta"}, priority=500)
    )
    mine = _made(
        await _post(api, secrets["acme"], job_key="K", job_key_mode=mode, payload={"who": "acme"})
    )
    fresh = _made(
        await _post(api, secrets["acme"], job_key="F", job_key_mode=mode, payload={"who": "acme"})
    )
    # A job of its own, as for a key nobody holds.
    assert mine["id"] != theirs["id"]
    assert mine["payload"] == fresh["payload"] == {"who": "acme"}
    assert (
        (mine["state"], mine["priority"])
        == (fresh["state"], fresh["priority"])
        == (
            "scheduled",
            100,
        )
    )
    # Beta's job is as beta left it.
    kept = await api.service.get_job(theirs["id"])
    assert (kept.payload, kept.priority, kept.job_key) == ({"who": "beta"}, 500, "K")
    # Within a tenant the key decides as before, across its token lines too.
    again = _made(
        await _post(api, secrets["acme-next"], job_key="K", job_key_mode=mode, payload={"n": 2})
    )
    assert again["id"] == mine["id"]
    assert again["payload"] == ({"who": "acme"} if mode == "unsafe_dedupe" else {"n": 2})
    assert await api.count_jobs() == 3


async def test_another_tenants_unique_for_period_is_an_absent_one(
    tenants: tuple[Api, dict[str, str]],
) -> None:
    api, secrets = tenants
    theirs = _made(await _post(api, secrets["beta"], job_key="U", payload={"who": "beta"}))
    mine = _made(
        await _post(api, secrets["acme"], job_key="U", unique_for="3650d", payload={"who": "acme"})
    )
    assert mine["id"] != theirs["id"]
    assert mine["payload"] == {"who": "acme"}
    same = _made(await _post(api, secrets["acme"], job_key="U", unique_for="3650d"))
    assert same["id"] == mine["id"]  # its own period holds


async def test_the_service_and_a_tenant_keep_their_own_keys(
    tenants: tuple[Api, dict[str, str]],
) -> None:
    api, secrets = tenants
    tenant_job = _made(await _post(api, secrets["beta"], job_key="S", payload={"who": "beta"}))
    service_job = _made(await _post(api, secrets["ops"], job_key="S", payload={"who": "ops"}))
    assert service_job["id"] != tenant_job["id"]
    from_code = await api.service.add_job("echo", {"who": "code"}, job_key="S")
    assert from_code.id == service_job["id"]  # the service's own key, replaced
    assert (await api.service.get_job(tenant_job["id"])).payload == {"who": "beta"}
    # By key, the service names its own job; a list by key shows every owner's.
    ops = {"Authorization": f"Bearer {secrets['ops']}"}
    by_key = await api.client.get("/v1/jobs/by-key/S", headers=ops)
    assert by_key.json()["id"] == service_job["id"]
    _made(await _post(api, secrets["beta"], job_key="only-beta"))
    absent = await api.client.get("/v1/jobs/by-key/only-beta", headers=ops)
    assert absent.status_code == 404
    listed = await api.client.get("/v1/jobs", params={"job_key": "S"}, headers=ops)
    assert sorted(j["id"] for j in listed.json()["jobs"]) == [tenant_job["id"], service_job["id"]]


async def test_another_tenants_job_as_an_after_reference_is_an_absent_one(
    tenants: tuple[Api, dict[str, str]],
) -> None:
    api, secrets = tenants
    theirs = _made(await _post(api, secrets["beta"], job_key="B"))
    by_id = await _post(api, secrets["acme"], after=[theirs["id"]])
    absent_id = await _post(api, secrets["acme"], after=[ABSENT_ID])
    assert by_id.status_code == absent_id.status_code == 422
    assert by_id.json() == absent_id.json() | {
        "message": absent_id.json()["message"].replace(str(ABSENT_ID), str(theirs["id"])),
        "errors": [
            {**e, "message": e["message"].replace(str(ABSENT_ID), str(theirs["id"]))}
            for e in absent_id.json()["errors"]
        ],
    }
    by_key = await _post(api, secrets["acme"], after=["B"])
    absent_key = await _post(api, secrets["acme"], after=["B-absent"])
    assert by_key.status_code == absent_key.status_code == 422
    assert by_key.text == absent_key.text.replace("B-absent", "B")
    assert await api.count_jobs() == 1
    # Its own jobs, by id or key, and the service's view of every job by id.
    own = _made(await _post(api, secrets["acme"], job_key="A"))
    _made(await _post(api, secrets["acme-next"], after=[own["id"], "A"]))
    _made(await _post(api, secrets["ops"], after=[theirs["id"]]))


async def test_another_tenants_idempotency_key_is_an_absent_one(
    tenants: tuple[Api, dict[str, str]],
) -> None:
    api, secrets = tenants
    key = {"Idempotency-Key": "order-17"}
    theirs = _made(await _post(api, secrets["beta"], key, payload={"who": "beta"}))
    mine = await _post(api, secrets["acme"], key, payload={"who": "acme"})
    assert mine.status_code == 201, mine.text  # not a replay, not a 422 for another body
    assert mine.json()["id"] != theirs["id"]
    assert mine.json()["payload"] == {"who": "acme"}
