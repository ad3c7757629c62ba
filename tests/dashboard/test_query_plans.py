"""Every statement a dashboard page runs is served by an index, on both engines.

Each page is rendered against a real database while every statement on hipq's
tables is recorded; then each is explained. SQLite must never ``SCAN`` one of
hipq's tables (a full table or full index scan); PostgreSQL, with sequential scans
switched off (the test tables are tiny, the question is whether an index *can*
serve the statement, as it will on a million rows), must show no ``Seq Scan``.
The one ``SCAN`` SQLite may show is the walk of a table's rowid B-tree from its
newest row for ``ORDER BY id DESC LIMIT n``, which stops after n rows.
Run with ``-s`` to print the plans (docs/dashboard.md shows them).
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import event

from tests.api.conftest import Api

PAGES = [
    "/dashboard",
    "/dashboard/processes",
    "/dashboard/jobs",
    "/dashboard/jobs?state=failed",
    "/dashboard/jobs?state=scheduled&state=running",
    "/dashboard/jobs?queue=bulk&label=region:east",
    "/dashboard/jobs?type=typed&job_key=nightly",
    "/dashboard/jobs?correlation_key=order-7",
    "/dashboard/jobs?since=2026-01-05T11:00&until=2026-01-05T13:00",
    "/dashboard/jobs?queue=default&before=3",
    "/dashboard/failed",
    "/dashboard/responses",
    "/dashboard/responses?status=late",
    "/dashboard/responses?status=matched",
    "/dashboard/responses?status=parked",
    "/dashboard/schedules",
    "/dashboard/history?period=7d",
    "/dashboard/batches",
    "/dashboard/batches?cursor=2",
    "/dashboard/batches/1",
    "/dashboard/batches/1?cursor=9",
]
# The schedules of the config and the API: tens of rows, read whole by GET /v1/schedules;
# the live processes and the queues' leases: a row per process and per queue, read
# whole for the overview's processes.
_SMALL_TABLES = ("hipq_schedules", "hipq_processes", "hipq_queues")
_FULL_SCAN = {
    "sqlite": re.compile(r"^SCAN hipq_\w+"),
    "postgresql": re.compile(r"Seq Scan on hipq_\w+"),
}


def _rowid_walk(statement: str, line: str, plan: list[str]) -> bool:
    """SQLite's ``SCAN t`` for ``ORDER BY t.id DESC LIMIT n`` walks the rowid B-tree
    from its end and stops after n rows (PostgreSQL shows the same read as an
    ``Index Scan Backward`` of the primary key)."""
    table = line.split()[1]
    return re.search(rf"ORDER BY {table}\.id DESC\s+LIMIT", statement) is not None and not any(
        "TEMP B-TREE FOR ORDER BY" in p for p in plan
    )


async def _explain(api: Api, statement: str, parameters: Any) -> list[str]:
    engine = api.service.store.engine
    dialect = engine.dialect.name
    prefix = "EXPLAIN QUERY PLAN " if dialect == "sqlite" else "EXPLAIN "
    async with engine.connect() as conn, conn.begin():
        if dialect == "postgresql":
            await conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
        rows = (await conn.exec_driver_sql(prefix + statement, tuple(parameters or ()))).all()
    return [str(r[-1]) for r in rows]


async def _seed(api: Api) -> int:
    await api.post_job(type="typed", payload={"order_id": 7}, labels={"region": "east"})
    await api.post_job(type="ok", job_key="nightly")
    await api.post_job(type="fail", retry={"strategy": "none"})
    await api.tick()
    await api.client.post("/v1/callbacks/unknown-key", json={"status": "ok"})
    made = await api.client.post(
        "/v1/schedules", json={"name": "hourly", "cron": "0 * * * *", "job": {"type": "ok"}}
    )
    assert made.status_code == 201, made.text
    assert (await api.client.post("/v1/schedules/hourly/run")).status_code == 201
    body = {"jobs": [{"type": "ok"}, {"type": "ok"}], "batch": {}}
    assert (await api.client.post("/v1/jobs/batch", json=body)).json()["batch_id"] == 1
    return (await api.post_job(type="typed", payload={"order_id": 8}))["id"]


async def test_every_dashboard_read_uses_an_index(api: Api) -> None:
    job_id = await _seed(api)
    engine = api.service.store.engine
    seen: dict[str, Any] = {}

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "hipq_" in statement and statement.lstrip().upper().startswith(("SELECT", "WITH")):
            seen.setdefault(statement, parameters)

    # The API's reads go through its own pool on PostgreSQL (``Dialect.budgeted``).
    engines = {engine, api.service.store.dialect.budgeted(engine)}
    for each in engines:
        event.listen(each.sync_engine, "before_cursor_execute", record)
    try:
        for path in [*PAGES, f"/dashboard/jobs/{job_id}"]:
            response = await api.client.get(path)
            assert response.status_code == 200, (path, response.text[:500])
    finally:
        for each in engines:
            event.remove(each.sync_engine, "before_cursor_execute", record)

    assert len(seen) >= 10  # the pages did read
    full_scan = _FULL_SCAN[engine.dialect.name]
    scans = []
    for statement, parameters in seen.items():
        plan = await _explain(api, statement, parameters)
        print(f"\n-- {' '.join(statement.split())[:400]}\n" + "\n".join(plan))
        scans += [
            (statement, line)
            for line in plan
            if full_scan.search(line)
            and not _rowid_walk(statement, line, plan)
            and not any(t in line for t in _SMALL_TABLES)
        ]
    assert scans == []
