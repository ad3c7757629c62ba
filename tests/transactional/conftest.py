"""A started hipq service (it mirrors its job types at start) on each engine, and the
application's own table beside hipq's."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hipq.service import Service
from hipq.store import Store
from tests.support import make_settings
from tests.transactional.apps import POSTGRES_KINDS, SQLITE_KINDS, prepare

JOB_TYPES: dict[str, Any] = {
    "receipt": {
        "queue": "mail",
        "priority": 7,
        "weight": 2,
        "timeout": "90s",
        "correlation_key": "receipt-{payload.order}:{labels.region}",
        "retry": {"strategy": "fixed", "delay": "1s", "max_attempts": 4},
        "transport": {"python": {"handler": "tests.handlers:ok"}},
    },
    # Labels and notification targets its jobs start with.
    "tagged": {
        "labels": {"kind": "mail", "region": "north"},
        "notify": ["hook"],
        "transport": {"python": {"handler": "tests.handlers:ok"}},
    },
    "per_attempt": {
        "correlation_key": "{payload.order}:{attempt}",
        "transport": {"python": {"handler": "tests.handlers:ok"}},
    },
}
QUEUES: dict[str, Any] = {"default": {}, "mail": {"concurrency": 3}}


def service_settings(database_url: str, **overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "job_types": JOB_TYPES,
        "queues": QUEUES,
        "notifications": {"targets": {"hook": {"webhook": {"url": "http://127.0.0.1:9/hook"}}}},
        "log_level": "warning",
    }
    return make_settings(database_url, **{**fields, **overrides})


CASES = [pytest.param(("sqlite", k), id=f"sqlite-{k}") for k in SQLITE_KINDS] + [
    pytest.param(("postgres", k), id=f"postgres-{k}", marks=pytest.mark.postgres)
    for k in POSTGRES_KINDS
]


@pytest.fixture(params=CASES)
async def case(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """(database URL, kind of the application's connection), once per engine and kind."""
    engine, kind = request.param
    if engine == "sqlite":
        path = tmp_path / "hipq.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite+aiosqlite:///{path}", kind
        return
    url = request.getfixturevalue("postgres_url")
    store = Store.from_url(url)
    await store.tables_empty()
    await store.close()
    yield url, kind


async def started(database_url: str, **overrides: Any) -> Service:
    """hipq started on ``database_url`` (its loops driven by the test, unless told
    otherwise), the application's table empty."""
    run_loops = overrides.pop("run_loops", False)
    svc = Service(service_settings(database_url, **overrides), run_loops=run_loops)
    await svc.start()
    await prepare(database_url)
    return svc


@pytest.fixture
async def service(database_url: str) -> AsyncIterator[Service]:
    svc = await started(database_url)
    yield svc
    await svc.stop()


@pytest.fixture
async def app_service(case: tuple[str, str]) -> AsyncIterator[tuple[Service, str]]:
    """hipq on the case's database, and the kind of the application's connection."""
    svc = await started(case[0])
    yield svc, case[1]
    await svc.stop()
