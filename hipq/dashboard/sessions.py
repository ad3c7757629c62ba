"""The dashboard's sign-in sessions, kept by the server: the cookie carries a random
session id, never the token. Sign-out revokes the session, a session expires
``SESSION_SECONDS`` after sign-in (and after ``IDLE_SECONDS`` unused), and every
sign-in gets a new id.

Sessions live in the memory of the process that signed the browser in. Behind
several hipq processes the tab still holds its token (``sessionStorage``): the sign-in
page, reached from a process that does not know the session, signs in again with it
at once.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["IDLE_SECONDS", "MAX_SESSIONS", "MAX_SESSIONS_PER_TOKEN", "SESSION_SECONDS", "Sessions"]

SESSION_SECONDS = 12 * 3600.0
IDLE_SECONDS = 3600.0
# Sign-ins kept at once; the oldest goes first beyond it (a flood of sign-ins by a
# holder of a valid token cannot grow the process without bound).
MAX_SESSIONS = 10_000
# Sign-ins kept at once per token: its own oldest goes first beyond it, so that one
# token's flood of sign-ins never pushes out another's session.
MAX_SESSIONS_PER_TOKEN = 20


@dataclass
class _Session:
    token: str
    expires: float
    last_used: float


class Sessions:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # Keyed by the id's digest: the ids themselves are nowhere but in the cookies.
        self._by_digest: dict[bytes, _Session] = {}

    def start(self, token: str) -> str:
        """A new session for ``token``; its id (for the cookie)."""
        now = self.clock()
        self._forget_expired(now)
        own = [key for key, session in self._by_digest.items() if session.token == token]
        for key in own[: max(0, len(own) - MAX_SESSIONS_PER_TOKEN + 1)]:
            del self._by_digest[key]
        while len(self._by_digest) >= MAX_SESSIONS:
            del self._by_digest[next(iter(self._by_digest))]
        session_id = secrets.token_urlsafe(32)
        self._by_digest[_digest(session_id)] = _Session(token, now + SESSION_SECONDS, now)
        return session_id

    def token_of(self, session_id: str) -> str | None:
        """The token of a live session; None for an unknown, ended or expired one."""
        key = _digest(session_id)
        session = self._by_digest.get(key)
        if session is None:
            return None
        now = self.clock()
        if now >= session.expires or now - session.last_used >= IDLE_SECONDS:
            del self._by_digest[key]
            return None
        session.last_used = now
        return session.token

    def end(self, session_id: str) -> None:
        self._by_digest.pop(_digest(session_id), None)

    def _forget_expired(self, now: float) -> None:
        for key, session in list(self._by_digest.items()):
            if now >= session.expires or now - session.last_used >= IDLE_SECONDS:
                del self._by_digest[key]


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()
