"""The dashboard's sign-in cookie is a session the server keeps, not the token: it
ends at sign-out, expires, and is new at every sign-in."""

from __future__ import annotations

from pathlib import Path

from hipq.dashboard.access import COOKIE
from hipq.dashboard.sessions import (
    IDLE_SECONDS,
    MAX_SESSIONS,
    MAX_SESSIONS_PER_TOKEN,
    SESSION_SECONDS,
    Sessions,
)
from hipq.security.tokens import config_line, new_token
from tests.api.conftest import open_api, sqlite_url

__all__ = ["sqlite_url"]  # a fixture


def _cookie(value: str) -> dict[str, str]:
    return {"cookie": f"{COOKIE}={value}"}


async def test_the_cookie_is_a_revocable_session_not_the_token(
    tmp_path: Path, sqlite_url: str
) -> None:
    token = new_token()
    file = tmp_path / "tokens"
    file.write_text(config_line("viewer", ["read"], token) + "\n")
    async with open_api(sqlite_url, auth={"tokens_file": str(file)}) as api:
        client = api.client
        bearer = {"Authorization": f"Bearer {token}"}
        signed_in = await client.post("/dashboard/session", headers=bearer)
        assert signed_in.status_code == 204
        first = signed_in.cookies[COOKIE]
        assert token not in signed_in.headers["set-cookie"]
        client.cookies.clear()

        page = await client.get("/dashboard/jobs", headers=_cookie(first))
        assert page.status_code == 200, page.text
        # The token itself is no cookie.
        assert (await client.get("/dashboard/jobs", headers=_cookie(token))).status_code == 303

        # A new sign-in, a new id; the browser's old session ends with it.
        again = await client.post("/dashboard/session", headers={**bearer, **_cookie(first)})
        second = again.cookies[COOKIE]
        client.cookies.clear()
        assert second != first
        assert (await client.get("/dashboard/jobs", headers=_cookie(first))).status_code == 303
        assert (await client.get("/dashboard/jobs", headers=_cookie(second))).status_code == 200

        # Sign-out revokes: a copy of the cookie kept elsewhere reads nothing more.
        out = await client.delete("/dashboard/session", headers=_cookie(second))
        assert out.status_code == 204
        client.cookies.clear()
        assert (await client.get("/dashboard/jobs", headers=_cookie(second))).status_code == 303


def test_sessions_expire() -> None:
    now = [0.0]
    sessions = Sessions(clock=lambda: now[0])
    idle = sessions.start("t1")
    busy = sessions.start("t2")
    assert idle != busy
    now[0] = IDLE_SECONDS - 1
    assert sessions.token_of(busy) == "t2"
    now[0] = IDLE_SECONDS + 1
    assert sessions.token_of(idle) is None  # unused for an hour
    assert sessions.token_of(busy) == "t2"
    step = IDLE_SECONDS / 2
    while now[0] + step < SESSION_SECONDS:
        now[0] += step
        assert sessions.token_of(busy) == "t2"
    now[0] = SESSION_SECONDS
    assert sessions.token_of(busy) is None  # used all along, but signed in 12 h ago


def test_one_tokens_sign_ins_never_push_out_anothers_session() -> None:
    sessions = Sessions(clock=lambda: 0.0)
    admin = sessions.start("admin-token")
    flood = [sessions.start("read-token") for _ in range(MAX_SESSIONS + 10)]
    assert sessions.token_of(admin) == "admin-token"
    # The flood keeps only its newest sessions.
    assert sessions.token_of(flood[-1]) == "read-token"
    assert sessions.token_of(flood[-MAX_SESSIONS_PER_TOKEN]) == "read-token"
    assert sessions.token_of(flood[-MAX_SESSIONS_PER_TOKEN - 1]) is None
