"""While the database is unavailable the API answers 503 with Retry-After in hipq's
error shape (never a 500), logs the fault once, and serves again when it is back."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy import event

from tests.api.conftest import Api, open_api
from tests.faults.proxy import TcpProxy
from tests.support import eventually

pytestmark = pytest.mark.postgres

# Long enough for a reconnect backoff that doubles up to 15 s to pass 8 s: the
# LISTEN connection then came back only seconds after the database.
OUTAGE_SECONDS = 8.5


def assert_unavailable(response: object) -> None:
    assert response.status_code == 503, response.text  # type: ignore[attr-defined]
    assert int(response.headers["retry-after"]) > 0  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert body["error"] == "database_unavailable"
    assert body["errors"] and body["message"]


async def test_an_outage_is_503_logged_once_and_ready_soon_after(
    proxy: TcpProxy, postgres_url_fresh: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_api(proxy.url(postgres_url_fresh)) as api:
        await api.post_job(type="ok")
        await eventually(lambda: _ready(api), timeout=60)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            await proxy.cut()
            answers = []
            for _ in range(int(OUTAGE_SECONDS / 0.25)):
                answers.append(await api.client.post("/v1/jobs", json={"type": "ok"}))
                await asyncio.sleep(0.25)
            assert answers and all(a.status_code == 503 for a in answers), {
                a.status_code for a in answers
            }
            assert_unavailable(answers[-1])
            assert (await api.client.get(f"/v1/jobs/{1}")).status_code == 503
            ready = await api.client.get("/readyz")
            assert ready.status_code == 503 and "database" in ready.json()["problems"]
            assert (await api.client.get("/healthz")).status_code == 200
            await proxy.start()
            # Ready again within a few seconds of the database (not after a reconnect
            # backoff grown during the outage).
            await eventually(lambda: _ready(api), timeout=60)
            await api.post_job(type="ok")
        lines = [r for r in caplog.records if r.name.startswith("hipq")]
        # 30+ failed requests, the LISTEN connection's retries: a start and an end each.
        assert len(lines) <= 6, [r.getMessage() for r in lines]
        assert not any(r.exc_info for r in lines), [r.getMessage() for r in lines]
        assert any("database unavailable" in r.getMessage() for r in lines)
        assert any("recovered" in r.getMessage() for r in lines)
    assert await _count_jobs(postgres_url_fresh) == 2


async def test_probes_during_an_outage_do_not_end_its_fault(
    proxy: TcpProxy, postgres_url_fresh: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_api(proxy.url(postgres_url_fresh)) as api:
        await api.post_job(type="ok")
        with caplog.at_level(logging.INFO, logger="hipq.api"):
            await proxy.cut()
            for _ in range(5):
                assert_unavailable(await api.client.post("/v1/jobs", json={"type": "ok"}))
                assert (await api.client.get("/healthz")).status_code == 200
                assert (await api.client.get("/metrics")).status_code == 200
                assert (await api.client.get("/v1/jobs/abc")).status_code == 422
            await proxy.start()
            await eventually(lambda: _ready(api), timeout=60)
            await api.post_job(type="ok")
        said = [r.getMessage() for r in caplog.records if r.name == "hipq.api"]
        assert sum("database unavailable" in m for m in said) == 1, said
        assert sum("recovered" in m for m in said) == 1, said


async def test_a_reset_connection_in_the_pool_is_not_used(
    proxy: TcpProxy, postgres_url_fresh: str
) -> None:
    async with open_api(proxy.url(postgres_url_fresh)) as api:
        await api.post_job(type="ok")
        proxy.reset()  # the pooled connections are dead, the database is up
        await api.post_job(type="ok")
        assert await api.count_jobs() == 2


async def test_a_full_sqlite_disk_is_503_and_not_ready(sqlite_url: str) -> None:
    async with open_api(sqlite_url) as api:
        engine = api.service.store.engine.sync_engine

        @event.listens_for(engine, "connect")
        def _full(dbapi_conn: object, _record: object) -> None:
            cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
            cur.execute("PRAGMA page_count")
            pages = cur.fetchone()[0]
            cur.execute(f"PRAGMA max_page_count={pages}")
            cur.close()

        await api.service.store.engine.dispose()  # new connections: the disk is full
        big = {"blob": "x" * 200_000}
        response = await api.client.post("/v1/jobs", json={"type": "ok", "payload": big})
        assert_unavailable(response)
        for _ in range(3):
            # A liveness probe between readiness probes does not make it ready (it
            # ended the fault: /readyz flapped while the disk was full).
            assert (await api.client.get("/healthz")).status_code == 200
            ready = await api.client.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert "full" in ready.json()["problems"]["database"]


async def _ready(api: Api) -> bool:
    return (await api.client.get("/readyz")).status_code == 200


async def _count_jobs(url: str) -> int:
    import asyncpg  # type: ignore[import-untyped]

    from hipq.store.process_guard import asyncpg_connect_kwargs

    conn = await asyncpg.connect(**asyncpg_connect_kwargs(url))
    try:
        return int(await conn.fetchval("SELECT count(*) FROM hipq_jobs"))
    finally:
        await conn.close()
