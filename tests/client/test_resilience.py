"""What the client does when the path to hipq fails: 503s and refused connections are
retried (Retry-After honoured) without ever making a second job; an answer lost after
the server acted is retried only where that is safe. Through a loopback proxy, or a
server that starts after the client's first call."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from hipq.client import AsyncClient, Backoff, Client, ConnectionFailed, Unauthorized
from hipq.security.tokens import config_line, new_token
from tests.client.conftest import Server, client_config, count_jobs, proxy_to, start_serve
from tests.services import stop_process
from tests.test_cli import free_port

pytestmark = pytest.mark.e2e


async def test_503s_are_retried_after_retry_after_and_make_one_job(server: Server) -> None:
    async with proxy_to(server.url) as proxy, AsyncClient(proxy.url) as hipq:
        proxy.plan = ["503", "503"]
        job = await hipq.add_job("ok", labels={"case": "after-503"})
        assert [action for _m, _t, action in proxy.seen] == ["503", "503", "forward"]
        # The same Idempotency-Key each time: one key, one job.
        assert count_jobs(server, label="case:after-503") == 1
        assert (await hipq.wait(job.id, timeout=30)).state == "completed"

        # A 503 stored nothing: even a call that is not idempotent is sent again.
        later = await hipq.add_job("ok", run_at="2100-01-01T00:00:00Z")
        proxy.plan = ["503"]
        assert (await hipq.cancel_job(later.id)).state == "cancelled"


async def test_a_lost_answer_to_an_add_is_retried_into_the_same_job(server: Server) -> None:
    async with proxy_to(server.url) as proxy, AsyncClient(proxy.url) as hipq:
        proxy.plan = ["lose", "lose"]
        job = await hipq.add_job("ok", labels={"case": "lost-answer"})
        assert [action for _m, _t, action in proxy.seen] == ["lose", "lose", "forward"]
        assert count_jobs(server, label="case:lost-answer") == 1

        proxy.plan = ["lose"]
        refs = await hipq.add_jobs([{"type": "ok", "labels": {"case": "lost-batch"}}] * 3)
        assert len(refs) == 3 and count_jobs(server, label="case:lost-batch") == 3

        proxy.plan = ["lose"]
        assert (await hipq.get_job(job.id)).id == job.id  # a read is simply asked again


async def test_a_lost_answer_to_a_cancel_is_not_sent_again(server: Server) -> None:
    async with proxy_to(server.url) as proxy, AsyncClient(proxy.url) as hipq:
        later = await hipq.add_job("ok", run_at="2100-01-01T00:00:00Z")
        proxy.plan = ["lose"]
        with pytest.raises(ConnectionFailed) as lost:
            await hipq.cancel_job(later.id)
        assert "no answer from hipq" in str(lost.value)
        assert [action for _m, _t, action in proxy.seen][-1] == "lose"
        # It did take effect: sent again, it would have been refused (409).
        assert (await hipq.get_job(later.id)).state == "cancelled"


def test_the_sync_client_retries_503s_too(server: Server) -> None:
    async def scenario() -> None:
        async with proxy_to(server.url) as proxy:
            proxy.plan = ["503"]
            with Client(proxy.url) as hipq:
                job = await asyncio.to_thread(hipq.add_job, "ok", labels={"case": "sync-503"})
                done = await asyncio.to_thread(hipq.wait, job.id, 30)
            assert done.state == "completed"
            assert [a for _m, _t, a in proxy.seen][:2] == ["503", "forward"]

    asyncio.run(scenario())
    assert count_jobs(server, label="case:sync-503") == 1


def test_a_server_down_for_longer_than_the_budget_is_one_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with Client(url, backoff=Backoff(budget=0.5)) as hipq, pytest.raises(ConnectionFailed) as down:
        hipq.list_queues()
    assert str(down.value).startswith(f"cannot reach hipq at {url}")


async def test_a_call_made_before_the_server_starts_waits_for_it(
    own_database_url: str, tmp_path: Path
) -> None:
    url = own_database_url
    port = free_port()
    async with AsyncClient(f"http://127.0.0.1:{port}") as hipq:
        adding = asyncio.create_task(hipq.add_job("ok", {"early": True}))
        await asyncio.sleep(0.5)  # refused meanwhile: nothing listens yet
        assert not adding.done()
        process = start_serve(
            client_config(tmp_path / "hipq.yaml", url), port, tmp_path / "serve.log"
        )
        try:
            job = await asyncio.wait_for(adding, 60)
            done = await hipq.wait(job.id, timeout=30)
            assert done.result == {"echo": {"early": True}}
            assert len((await hipq.list_jobs()).jobs) == 1
        finally:
            stop_process(process)


def test_the_token_comes_from_the_argument_or_hipq_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = new_token()
    port = free_port()
    config = client_config(tmp_path / "hipq.yaml", f"sqlite+aiosqlite:///{tmp_path / 'auth.db'}")
    tokens = {"HIPQ_TOKENS": config_line("app", ["submit", "read"], token)}
    process = start_serve(config, port, tmp_path / "serve.log", env=tokens)
    url = f"http://127.0.0.1:{port}"
    try:
        with Client(url) as anonymous:
            anonymous.wait_ready(60)
            with pytest.raises(Unauthorized) as refused:
                anonymous.list_queues()
            assert refused.value.status == 401
        with Client(url, token=token) as app:
            job = app.add_job("ok")
            assert app.wait(job.id, timeout=30).state == "completed"
            with pytest.raises(Unauthorized) as no_scope:
                app.pause_queue("default")
            assert no_scope.value.status == 403
        monkeypatch.setenv("HIPQ_TOKEN", token)
        with Client(url) as from_env:
            assert [q.name for q in from_env.list_queues()] == ["default", "other"]
    finally:
        stop_process(process)
