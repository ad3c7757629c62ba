"""The tenant matrix: two tenants' tokens, ``acme`` and ``beta``, on every route of
the app and every field that names another object, on both engines. Each tenant
names the other's object and one that does not exist; the two answers must be the
same (status and body, the name itself aside), so a tenant learns nothing of another
tenant's jobs, batches, schedules, responses, queues, job types or targets.

The routes are read from the app: a new route, or a path parameter the matrix does
not know, fails here until it is added. Job keys, correlation keys, idempotency keys
and ``after`` are in test_tenant_owned_keys.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from hipq.api.auth import routes
from hipq.security.tokens import config_line, new_token
from tests.api.conftest import Api, open_api

OK = {"python": {"handler": "tests.handlers:ok"}}
TENANTS = ("acme", "beta")
TYPES = {f"{t}_echo": {"transport": OK, "queue": t} for t in TENANTS}
QUEUES = {"default": {}, "bulk": {}, **{t: {"concurrency": 10} for t in TENANTS}}
TARGETS = {f"{t}-hook": {"webhook": {"url": f"http://127.0.0.1:9/{t}"}} for t in TENANTS}
# Every name an absent object answers to: an id or a name nothing has.
ABSENT_ID = 987654
ABSENT_NAME = "absent-x"


@dataclass
class Objects:
    """One tenant's objects, by the path parameter that names them."""

    job_id: int
    job_key: str
    batch_id: int
    open_batch_id: int
    name: str  # its queue; its schedule has the same name
    key: str  # a correlation key of its job
    response_id: int
    bulk_id: int

    def param(self, name: str) -> str:
        return str(getattr(self, name))


ABSENT = Objects(
    ABSENT_ID, ABSENT_NAME, ABSENT_ID, ABSENT_ID, ABSENT_NAME, ABSENT_NAME, ABSENT_ID, ABSENT_ID
)


@dataclass
class Matrix:
    api: Api
    tokens: dict[str, str]  # acme, beta, admin
    objects: dict[str, Objects]

    def header(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


async def _made(answer: httpx.Response) -> Any:
    assert answer.status_code in (200, 201, 202), answer.text
    return answer.json()


async def _objects(
    api: Api, tenant: str, headers: dict[str, str], admin: dict[str, str]
) -> Objects:
    post = api.client.post
    job = await _made(
        await post(
            "/v1/jobs",
            json={"type": f"{tenant}_echo", "job_key": f"{tenant}-key", "run_in": "1h"},
            headers=headers,
        )
    )
    keyed = await _made(
        await post(
            "/v1/jobs",
            json={"type": f"{tenant}_echo", "correlation_key": f"{tenant}-corr", "run_in": "1h"},
            headers=headers,
        )
    )
    assert keyed["correlation_key"] == f"{tenant}-corr"
    sealed = await _made(await post("/v1/batches", json={}, headers=headers))
    await _made(await post(f"/v1/batches/{sealed['id']}/seal", headers=headers))
    opened = await _made(await post("/v1/batches", json={}, headers=headers))
    schedule = {"name": tenant, "cron": "0 2 * * *", "job": {"type": f"{tenant}_echo"}}
    await _made(await post("/v1/schedules", json=schedule, headers=admin))
    await _made(await post(f"/v1/callbacks/{tenant}-stray", json={"ok": 1}, headers=admin))
    listed = await _made(await api.client.get("/v1/responses", headers=admin))
    response_id = max(r["id"] for r in listed["responses"])
    bulk = {"action": "cancel", "filter": {"queue": tenant, "states": ["completed"]}}
    bulk_id = (await _made(await post("/v1/jobs/bulk", json=bulk, headers=admin)))["id"]
    return Objects(
        job["id"],
        f"{tenant}-key",
        sealed["id"],
        opened["id"],
        tenant,
        f"{tenant}-corr",
        response_id,
        bulk_id,
    )


@pytest.fixture
async def matrix(database_url: str, tmp_path: Path) -> AsyncIterator[Matrix]:
    tokens = {name: new_token() for name in (*TENANTS, "admin")}
    lines = [
        config_line(
            t,
            ["submit", "read", "operate", "callbacks"],
            tokens[t],
            queues=[t],
            limits=[f"notify={t}-hook"],
        )
        for t in TENANTS
    ]
    lines.append(config_line("admin", ["admin"], tokens["admin"]))
    tokens["typed"] = new_token()  # restricted by type only
    lines.append(config_line("typed", ["submit"], tokens["typed"], types=["acme_echo"]))
    (tmp_path / "tokens").write_text("\n".join(lines) + "\n")
    async with open_api(
        database_url,
        auth={"tokens_file": str(tmp_path / "tokens")},
        job_types=TYPES,
        queues=QUEUES,
        notifications={"targets": TARGETS},
    ) as api:
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        objects = {
            t: await _objects(api, t, {"Authorization": f"Bearer {tokens[t]}"}, admin)
            for t in TENANTS
        }
        yield Matrix(api, tokens, objects)


# A route's path parameter -> the attribute of ``Objects`` that fills it.
PARAMS = {
    "job_id": "job_id",
    "job_key": "job_key",
    "batch_id": "open_batch_id",
    "bulk_id": "bulk_id",
    "name": "name",
    "key": "key",
    "response_id": "response_id",
}
# Mounts (static files) name files, not objects.
SKIPPED = {"/dashboard/static/{path}", "/docs-assets/{path}"}


def _fill(path: str, objects: Objects) -> str:
    for param, attribute in PARAMS.items():
        path = path.replace("{" + param + "}", objects.param(attribute))
    assert "{" not in path, f"a path parameter the tenant matrix does not know: {path}"
    return path


def _normal(answer: httpx.Response, *names: str) -> tuple[int, str, str | None]:
    """What a caller sees, the name it gave replaced (an absent id's 404 says its id)."""
    text = answer.text
    for name in names:
        text = text.replace(name, "<name>")
    return answer.status_code, text, answer.headers.get("content-type")


def _other(tenant: str) -> str:
    return TENANTS[1 - TENANTS.index(tenant)]


async def test_every_route_answers_another_tenants_objects_as_absent_ones(
    matrix: Matrix,
) -> None:
    api = matrix.api
    cases = 0
    for route in routes(_app(api)):
        path = route.path_format or ""
        if path in SKIPPED or not route.methods:
            continue
        for method in sorted(route.methods - {"HEAD"}):
            for tenant in TENANTS:
                theirs = matrix.objects[_other(tenant)]
                answers = []
                # A route that names no object is called once (its fields: below).
                for objects in (theirs, ABSENT) if "{" in path else (theirs, theirs):
                    url = _fill(path, objects)
                    answer = await api.client.request(
                        method, url, headers=matrix.header(tenant), json={}
                    )
                    answers.append(_normal(answer, *_names(path, objects)))
                if "{" in path:
                    assert answers[0] == answers[1], (method, path, tenant)
                assert answers[0][0] < 500, (method, path, answers[0])
                cases += 1
    assert cases >= 2 * 70, cases  # every route, both ways
    print(f"tenant matrix: {cases} route cases")


def _names(path: str, objects: Objects) -> list[str]:
    """The values that fill ``path``, longest first (a name within another)."""
    found = [objects.param(a) for p, a in PARAMS.items() if "{" + p + "}" in path]
    return sorted(found, key=len, reverse=True)


def _app(api: Api) -> Any:
    transport = api.client._transport
    assert isinstance(transport, httpx.ASGITransport)
    return transport.app


# Fields of what a tenant may send that name another object: (route, body for a name).
# A tenant's own names are acme_echo, acme, acme-hook; the other's the same for beta.
def _field_cases(tenant: str, theirs: Objects, other: str) -> list[tuple[str, str, Any, Any]]:
    own_type = f"{tenant}_echo"
    job = {"type": own_type}

    def both(path: str, body: Any, absent: Any) -> tuple[str, str, Any, Any]:
        return "POST", path, body, absent

    return [
        both("/v1/jobs", {**job, "batch_id": theirs.open_batch_id}, {**job, "batch_id": ABSENT_ID}),
        both(
            "/v1/jobs/batch",
            {"jobs": [job, {**job, "batch_id": theirs.open_batch_id}]},
            {"jobs": [job, {**job, "batch_id": ABSENT_ID}]},
        ),
        both(f"/v1/batches/{theirs.open_batch_id}/seal", None, None),
        both("/v1/jobs", {"type": f"{other}_echo"}, {"type": ABSENT_NAME}),
        both("/v1/jobs", {**job, "queue": other}, {**job, "queue": ABSENT_NAME}),
        both("/v1/jobs", {**job, "notify": [f"{other}-hook"]}, {**job, "notify": [ABSENT_NAME]}),
        both(
            "/v1/jobs/batch",
            {"jobs": [job, {"type": f"{other}_echo"}]},
            {"jobs": [job, {"type": ABSENT_NAME}]},
        ),
        both(
            "/v1/batches",
            {"on_complete": {"type": f"{other}_echo"}},
            {"on_complete": {"type": ABSENT_NAME}},
        ),
        both(
            "/v1/batches",
            {"on_complete": {"type": own_type, "queue": other}},
            {"on_complete": {"type": own_type, "queue": ABSENT_NAME}},
        ),
        both("/v1/batches", {"notify": [f"{other}-hook"]}, {"notify": [ABSENT_NAME]}),
        both(
            "/v1/jobs/batch",
            {"jobs": [job], "batch": {"on_complete": {"type": f"{other}_echo"}}},
            {"jobs": [job], "batch": {"on_complete": {"type": ABSENT_NAME}}},
        ),
        both(
            "/v1/jobs/batch",
            {"jobs": [job], "batch": {"notify": [f"{other}-hook"]}},
            {"jobs": [job], "batch": {"notify": [ABSENT_NAME]}},
        ),
    ]


async def test_every_field_naming_another_tenants_object_answers_as_absent(
    matrix: Matrix,
) -> None:
    api = matrix.api
    before = await api.count_jobs()
    cases = 0
    for tenant in TENANTS:
        other = _other(tenant)
        theirs = matrix.objects[other]
        for method, path, body, absent in _field_cases(tenant, theirs, other):
            names = [str(theirs.open_batch_id), f"{other}_echo", f"{other}-hook", other]
            seen = await api.client.request(method, path, json=body, headers=matrix.header(tenant))
            if body is None:  # the seal: the path names the batch
                path = path.replace(str(theirs.open_batch_id), str(ABSENT_ID))
            gone = await api.client.request(
                method, path, json=absent, headers=matrix.header(tenant)
            )
            assert _normal(seen, *names) == _normal(gone, str(ABSENT_ID), ABSENT_NAME), path
            assert seen.status_code in (403, 404, 422), (path, seen.text)
            cases += 1
    assert await api.count_jobs() == before  # nothing was stored
    # The other tenant's batch is still open: nobody sealed nor joined it.
    for tenant in TENANTS:
        batch_id = matrix.objects[tenant].open_batch_id
        found = await api.client.get(f"/v1/batches/{batch_id}", headers=matrix.header("admin"))
        assert (found.json()["status"], found.json()["total"]) == ("open", 0)
    # Its own batch is there for the tenant: joined, then sealed.
    own = matrix.objects["acme"].open_batch_id
    joined = await api.client.post(
        "/v1/jobs", json={"type": "acme_echo", "batch_id": own}, headers=matrix.header("acme")
    )
    assert joined.status_code == 201, joined.text
    sealed = await api.client.post(f"/v1/batches/{own}/seal", headers=matrix.header("acme"))
    assert (sealed.status_code, sealed.json()["total"], sealed.json()["owner"]) == (200, 1, "acme")
    # Its own completion job and target pass.
    completing = {"on_complete": {"type": "acme_echo"}, "notify": ["acme-hook"]}
    made = await api.client.post("/v1/batches", json=completing, headers=matrix.header("acme"))
    assert (made.status_code, made.json()["on_complete"]) == (201, "acme_echo"), made.text
    # An unrestricted token acts for the whole service: it seals a tenant's batch.
    theirs = matrix.objects["beta"].open_batch_id
    by_admin = await api.client.post(f"/v1/batches/{theirs}/seal", headers=matrix.header("admin"))
    assert (by_admin.status_code, by_admin.json()["owner"]) == (200, "beta")
    print(f"tenant matrix: {cases} field cases")


async def test_a_token_restricted_by_type_submits_only_to_its_types_queues(
    matrix: Matrix,
) -> None:
    post, typed = matrix.api.client.post, matrix.header("typed")
    own = await post("/v1/jobs", json={"type": "acme_echo"}, headers=typed)
    assert (own.status_code, own.json()["queue"]) == (201, "acme"), own.text
    for queue in ("beta", "default", ABSENT_NAME):
        moved = await post("/v1/jobs", json={"type": "acme_echo", "queue": queue}, headers=typed)
        assert (moved.status_code, moved.json()["field"]) == (403, "queue"), moved.text
