"""``log_level: debug`` shows what hipq does, not what jobs carry: no statement's
parameters (payloads, results) in a log line or in a database error's text."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from hipq.observability.lifecycle_log import configure_logging
from hipq.store import Store
from tests.api.conftest import open_api

SECRET = "card-4111-1111-1111-1111"


@pytest.fixture
def debug_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {n: logging.getLogger(n).level for n in ("sqlalchemy.engine", "aiosqlite")}
    out = io.StringIO()
    monkeypatch.setattr("sys.stderr", out)
    configure_logging("debug")
    try:
        yield out
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        for name, old in levels.items():
            logging.getLogger(name).setLevel(old)


async def test_a_debug_log_holds_no_payload(database_url: str, debug_log: io.StringIO) -> None:
    async with open_api(database_url) as api:
        job = await api.post_job(type="ok", payload={"card": SECRET})
        await api.tick()
        assert (await api.job(job["id"]))["state"] == "completed"
    logged = debug_log.getvalue()
    assert logged  # debug lines were written
    assert SECRET not in logged


async def test_a_database_errors_text_holds_no_parameters(database_url: str) -> None:
    store = Store.from_url(database_url)
    try:
        async with store.engine.connect() as conn:
            with pytest.raises(sa_exc.DBAPIError) as caught:
                await conn.execute(text("SELECT * FROM no_such_table WHERE x = :x"), {"x": SECRET})
        assert SECRET not in str(caught.value)
    finally:
        await store.close()
