"""Each route, each scope: no token 401, a bad token 401, another scope 403, its own works."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hipq.security.tokens import SCOPES
from tests.api.conftest import Api
from tests.auth.conftest import Tokens


@dataclass
class Call:
    method: str
    path: str
    scope: str
    works: tuple[int, ...]  # the statuses of a caller with the scope
    body: Any = None


async def _calls(api: Api, tokens: Tokens) -> list[Call]:
    admin = tokens.header("admin")
    made = [
        (await api.client.post("/v1/jobs", json={"type": "ok"}, headers=admin)).json()["id"]
        for _ in range(2)
    ]
    stored = await api.client.post("/v1/callbacks/k-1", json={"ok": True}, headers=admin)
    response_id = stored.json()["response_id"]
    scheduled, to_cancel = made
    return [
        Call("POST", "/v1/jobs", "submit", (201,), {"type": "ok"}),
        Call("POST", "/v1/jobs/batch", "submit", (201,), {"jobs": [{"type": "ok"}]}),
        Call("GET", "/v1/jobs", "read", (200,)),
        Call("GET", f"/v1/jobs/{scheduled}", "read", (200,)),
        Call("PATCH", f"/v1/jobs/{scheduled}", "operate", (200,), {"priority": 5}),
        Call("POST", f"/v1/jobs/{to_cancel}/cancel", "operate", (200,)),
        Call("POST", f"/v1/jobs/{to_cancel}/retry", "operate", (200,)),
        Call("GET", "/v1/queues", "read", (200,)),
        Call("GET", "/v1/queues/default", "read", (200,)),
        Call("POST", "/v1/queues/default/pause", "operate", (200,)),
        Call("POST", "/v1/queues/default/resume", "operate", (200,)),
        Call("PATCH", "/v1/queues/default/limits", "operate", (200,), {"concurrency": 5}),
        Call("DELETE", "/v1/queues/default/limits", "operate", (200,)),
        Call("GET", "/v1/responses", "read", (200,)),
        Call("GET", "/v1/responses/parked", "read", (200,)),
        Call("GET", f"/v1/responses/{response_id}", "read", (200,)),
        # No job awaits it: a 409 is the answer of a caller allowed to match.
        Call(
            "POST", f"/v1/responses/{response_id}/match", "operate", (409,), {"job_id": scheduled}
        ),
        Call("POST", "/v1/callbacks/k-2", "callbacks", (202,), {"ok": True}),
        Call("GET", "/metrics", "read", (200,)),
    ]


async def _send(api: Api, call: Call, headers: dict[str, str]) -> Any:
    return await api.client.request(call.method, call.path, json=call.body, headers=headers)


def _refused(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == code and body["message"], body


async def test_each_route_needs_its_scope(authed: Api, tokens: Tokens) -> None:
    calls = await _calls(authed, tokens)
    covered = {
        (c.method, c.path.split("/")[2] if c.path.startswith("/v1") else c.path) for c in calls
    }
    assert len(covered) > 5
    for call in calls:
        missing = await _send(authed, call, {})
        _refused(missing, 401, "unauthorized")
        assert missing.headers["www-authenticate"].startswith("Bearer")
        bad = await _send(authed, call, {"Authorization": "Bearer hipq_not-a-configured-token"})
        _refused(bad, 401, "unauthorized")
        _refused(
            await _send(authed, call, {"Authorization": "Basic dXNlcjpwdw=="}), 401, "unauthorized"
        )
        for other in SCOPES:
            if other not in (call.scope, "admin"):
                wrong = await _send(authed, call, tokens.header(other))
                _refused(wrong, 403, "forbidden")
                assert call.scope in wrong.json()["message"]
        right = await _send(authed, call, tokens.header(call.scope))
        assert right.status_code in call.works, (call, right.text)


async def test_changed_limits_name_the_token_that_changed_them(authed: Api, tokens: Tokens) -> None:
    answer = await authed.client.patch(
        "/v1/queues/default/limits", json={"concurrency": 4}, headers=tokens.header("operate")
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["limits"]["changed_by"] == "operate-client"
    shown = await authed.client.get("/v1/queues/default", headers=tokens.header("read"))
    assert shown.json()["limits"]["changed_by"] == "operate-client"
    assert tokens.by_scope["operate"] not in shown.text


async def test_admin_may_do_everything(authed: Api, tokens: Tokens) -> None:
    for call in await _calls(authed, tokens):
        response = await _send(authed, call, tokens.header("admin"))
        assert response.status_code in call.works, (call, response.text)


async def test_health_stays_open_and_readyz_hides_the_host_without_read(
    authed: Api, tokens: Tokens
) -> None:
    assert (await authed.client.get("/healthz")).status_code == 200
    # A bad token on an open route is ignored, not refused.
    bad = {"Authorization": "Bearer nope"}
    assert (await authed.client.get("/healthz", headers=bad)).status_code == 200
    anonymous = await authed.client.get("/readyz")
    assert anonymous.status_code == 200
    # Neither the host nor the config's queue names for a probe without read.
    assert {"owner", "queues_owned"}.isdisjoint(anonymous.json())
    submitter = await authed.client.get("/readyz", headers=tokens.header("submit"))
    assert {"owner", "queues_owned"}.isdisjoint(submitter.json())
    reader = (await authed.client.get("/readyz", headers=tokens.header("read"))).json()
    assert reader["owner"] == authed.service.owner
    assert reader["queues_owned"] == []


async def test_unknown_type_lists_the_configured_ones_only_to_readers(
    authed: Api, tokens: Tokens
) -> None:
    submitter = await authed.client.post(
        "/v1/jobs", json={"type": "nope"}, headers=tokens.header("submit")
    )
    assert submitter.status_code == 422
    assert submitter.json()["message"] == "type: unknown job type 'nope'"
    assert "typed" not in submitter.text
    admin = await authed.client.post(
        "/v1/jobs", json={"type": "nope"}, headers=tokens.header("admin")
    )
    assert "known: " in admin.json()["message"] and "typed" in admin.json()["message"]


async def test_without_tokens_everything_is_open_as_before(api: Api) -> None:
    assert (await api.client.post("/v1/jobs", json={"type": "ok"})).status_code == 201
    assert (await api.client.get("/metrics")).status_code == 200
    assert "owner" in (await api.client.get("/readyz")).json()
    unknown = await api.client.post("/v1/jobs", json={"type": "nope"})
    assert "known: " in unknown.json()["message"]


async def test_rotation_old_and_new_token_both_valid(authed: Api, tokens: Tokens) -> None:
    # The tokens file holds a token per scope: two with read (read and admin) are
    # valid at once, as an old and a new one during a rotation.
    for scope in ("read", "admin"):
        assert (
            await authed.client.get("/v1/jobs", headers=tokens.header(scope))
        ).status_code == 200


async def test_no_token_is_refused_before_the_body_is_read(authed: Api) -> None:
    # A caller without a token learns nothing from validation: 401, not 422 or 413.
    invalid = await authed.client.post(
        "/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}
    )
    _refused(invalid, 401, "unauthorized")
    huge = await authed.client.post("/v1/jobs", content=b"x" * (9 * 1024 * 1024))
    _refused(huge, 401, "unauthorized")
