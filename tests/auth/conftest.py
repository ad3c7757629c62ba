"""Fixtures of the auth tests: an API with one token per scope, from a tokens file."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from hipq.security.tokens import SCOPES, config_line, new_token
from tests.api.conftest import Api, open_api
from tests.api.conftest import api as api  # a fixture: the API without tokens

SIGNED_SECRET = "whsec_" + "c2lnbmluZy1zZWNyZXQtZm9yLXRlc3Rz"  # base64 of 24 bytes


@dataclass
class Tokens:
    by_scope: dict[str, str]  # a token holding only that scope (admin: all)
    tenant: str  # submit and read, restricted to queue "bulk"
    file: Path

    def header(self, scope: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.by_scope[scope]}"}

    def all_secrets(self) -> list[str]:
        return [*self.by_scope.values(), self.tenant]


def write_tokens(path: Path) -> Tokens:
    by_scope = {scope: new_token() for scope in SCOPES}
    tenant = new_token()
    lines = [config_line(f"{scope}-client", [scope], token) for scope, token in by_scope.items()]
    lines.append(config_line("tenant", ["submit", "read"], tenant, queues=["bulk"]))
    path.write_text("# test tokens\n" + "\n".join(lines) + "\n")
    return Tokens(by_scope, tenant, path)


@pytest.fixture
def tokens(tmp_path: Path) -> Tokens:
    return write_tokens(tmp_path / "tokens")


# Job types for the callback rules: a signature, a token, or either.
CALLBACK_TYPES = {
    "signed": {
        "transport": {"python": {"handler": "tests.handlers:ok"}},
        "callback_signature": {"secret": SIGNED_SECRET},
    },
    "either": {
        "transport": {"python": {"handler": "tests.handlers:ok"}},
        "callback_signature": {"secret": SIGNED_SECRET},
        "callback_auth": "either",
    },
}


@pytest.fixture
async def authed(database_url: str, tokens: Tokens) -> AsyncIterator[Api]:
    """The API on each engine, tokens required."""
    async with open_api(
        database_url, auth={"tokens_file": str(tokens.file)}, job_types=CALLBACK_TYPES
    ) as opened:
        yield opened


@pytest.fixture
async def sqlite_authed(
    tmp_path: Path, sqlite_template: Path, tokens: Tokens
) -> AsyncIterator[Api]:
    """On SQLite only, for what never depends on the engine (the schema, the routes)."""
    shutil.copy(sqlite_template, tmp_path / "hipq.db")
    async with open_api(
        f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}",
        auth={"tokens_file": str(tokens.file)},
        job_types=CALLBACK_TYPES,
    ) as opened:
        yield opened
