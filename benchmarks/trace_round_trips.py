"""Database round trips per single-job POST and per idle wake-up (prints counts, asserts nothing).

    python benchmarks/trace_round_trips.py [--engine both] [--jobs 50]

An in-process ``Service`` (its loops running, one python job type whose handler does
nothing) and the API over ``httpx.ASGITransport``. Each POST goes to an idle queue,
then the script waits until the job completed before the next. Round trips are
counted with SQLAlchemy's events: each statement, each BEGIN (``begin``, except in
autocommit), each COMMIT and each ROLLBACK, and each connection ping, split by who
made them (the API request or the loop); statements that hipq sends on the asyncpg
connection itself are counted where it calls asyncpg. Round trips are the figure that does not
move with the machine's load; wall-clock figures come from ``hipq bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engines import add_engine_options, chosen_engines

from hipq.app import create_app
from hipq.commands.bench import fresh_database
from hipq.service import Service
from tests.support import eventually, make_settings

_who: ContextVar[str] = ContextVar("who", default="loop")
DETAIL = False
counts: Counter[tuple[str, str]] = Counter()


def _kind(statement: str) -> str:
    if DETAIL:
        return " ".join(statement.split())[:110]
    words = statement.lstrip("( ").split(None, 2)
    head = words[0].upper() if words else "?"
    if head == "WITH" and len(words) > 1:
        return f"WITH {words[1]}"  # named by its first part (ins: insert + notify)
    return head


def _listen(engine: Any) -> None:
    sync = engine.sync_engine

    @event.listens_for(sync, "before_cursor_execute")
    def _statement(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        counts[(_who.get(), _kind(statement))] += 1

    @event.listens_for(sync, "begin")
    def _begin(conn: Any) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            counts[(_who.get(), "BEGIN")] += 1

    @event.listens_for(sync, "commit")
    def _commit(conn: Any) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            counts[(_who.get(), "COMMIT")] += 1

    @event.listens_for(sync, "rollback")
    def _rollback(conn: Any) -> None:
        # The pool's reset on return: asyncpg's adapter sends nothing outside a
        # transaction (autocommit).
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            counts[(_who.get(), "ROLLBACK")] += 1


def _listen_to_every_engine() -> None:
    """The store's engine and any the dialect opens itself (its insert pool)."""
    from hipq.store import dialects

    original = dialects.create_engine

    def create_engine(*args: Any, **kwargs: Any) -> Any:
        engine = original(*args, **kwargs)
        _listen(engine)
        return engine

    dialects.create_engine = create_engine  # type: ignore[assignment]
    import hipq.store.store

    hipq.store.store.create_engine = create_engine  # type: ignore[attr-defined]


def _count_pings() -> None:
    try:
        from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection
    except ImportError:
        return
    original = AsyncAdapt_asyncpg_connection.ping

    def ping(self: Any) -> Any:
        counts[(_who.get(), "ping")] += 1
        return original(self)

    AsyncAdapt_asyncpg_connection.ping = ping  # type: ignore[method-assign]


def _count_driver_statements() -> None:
    """Statements hipq sends on the asyncpg connection itself (the loop's tick on
    PostgreSQL), which SQLAlchemy's events do not see. Calls from SQLAlchemy's adapter
    or asyncpg (its BEGIN and COMMIT) are counted by the events above."""
    try:
        from asyncpg.connection import Connection
    except ImportError:
        return
    for name in ("fetch", "fetchrow", "fetchval", "execute", "executemany"):
        original = getattr(Connection, name)

        def counted(original: Any = original) -> Any:
            async def call(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
                if "/hipq/" in sys._getframe(1).f_code.co_filename:
                    counts[(_who.get(), _kind(query))] += 1
                return await original(self, query, *args, **kwargs)

            return call

        setattr(Connection, name, counted())


@contextmanager
def _as(who: str) -> Iterator[None]:
    token = _who.set(who)
    try:
        yield
    finally:
        _who.reset(token)


async def trace(url: str, jobs: int) -> None:
    settings = make_settings(
        url,
        job_types={"noop": {"transport": {"python": {"handler": "hipq.handlers:noop"}}}},
        queues={"default": {"batch_interval": "1s"}},
    )
    service = Service(settings)
    await service.start()
    app = create_app(service, manage_service=False)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app), base_url="http://localhost"
        ) as client:

            async def post() -> int:
                with _as("api"):
                    response = await client.post("/v1/jobs", json={"type": "noop"})
                assert response.status_code == 201, response.text
                return int(response.json()["id"])

            async def done(job_id: int) -> bool:
                with _as("check"):
                    job = await service.store.job_get(job_id)
                return job.state.value == "completed"

            for _ in range(5):  # warm-up: connections opened, statements prepared
                job_id = await post()
                await eventually(lambda job_id=job_id: done(job_id))
            await asyncio.sleep(0.2)
            counts.clear()
            for _ in range(jobs):
                job_id = await post()
                await eventually(lambda job_id=job_id: done(job_id))
                await asyncio.sleep(0.05)  # the queue goes idle again
    finally:
        await service.stop()
    for who in ("api", "loop"):
        mine = {k: v for (w, k), v in counts.items() if w == who}
        total = sum(mine.values())
        parts = ", ".join(f"{k} {v / jobs:.2f}" for k, v in sorted(mine.items()))
        print(f"  {who:5} {total / jobs:5.2f} round trips per job: {parts}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    add_engine_options(parser)
    args = parser.parse_args()
    _count_pings()
    _count_driver_statements()
    _listen_to_every_engine()
    with tempfile.TemporaryDirectory() as tmp:
        engines, opts = chosen_engines(args)
        for engine in engines:
            print(f"{engine}: {args.jobs} single POSTs, each to an idle queue, run to completion")
            async with fresh_database(engine, opts, Path(tmp), "trace") as url:
                await trace(url, args.jobs)


if __name__ == "__main__":
    asyncio.run(main())
