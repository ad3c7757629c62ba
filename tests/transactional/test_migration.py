"""Migration 0023 (PostgreSQL): the SQL functions of transactional enqueue replaced, not
overloaded, and its downgrade gives 0007's functions back, working."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from alembic.config import Config

from alembic import command
from hipq.store.migrations import script_location
from tests.services import create_database_sync, drop_database_sync, unique_database_name

pytestmark = pytest.mark.postgres

SIGNATURES = """SELECT proname || '(' || pg_get_function_identity_arguments(oid) || ')'
  FROM pg_proc WHERE proname LIKE 'hipq\\_%' AND prokind = 'f' ORDER BY 1"""
MIRROR = """
INSERT INTO hipq_job_types VALUES ('echo', 'default', 100, 1, 60, '{"strategy": "none"}',
  NULL, NULL, false, 'test', now());
INSERT INTO hipq_queue_capacities VALUES ('default', NULL, 'test', now());
"""


@pytest.fixture
def libpq(postgres_admin_url: str) -> Iterator[str]:
    name = unique_database_name("hipq_0023")
    url = create_database_sync(postgres_admin_url, name)
    try:
        yield "postgresql://" + url.split("://", 1)[1]
    finally:
        drop_database_sync(postgres_admin_url, name)


def migrate(libpq: str, revision: str, down: bool = False) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    engine = sa.create_engine(libpq.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            (command.downgrade if down else command.upgrade)(cfg, revision)
    finally:
        engine.dispose()


def functions(libpq: str) -> list[str]:
    with psycopg.connect(libpq) as conn:
        return [r[0] for r in conn.execute(SIGNATURES)]


def test_upgrade_replaces_and_downgrade_restores(libpq: str) -> None:
    migrate(libpq, "0022")
    before = functions(libpq)
    migrate(libpq, "0023")
    after = functions(libpq)
    assert [f for f in after if f.startswith("hipq_add_job(")] == [
        "hipq_add_job(job_type text, payload jsonb, queue text, run_at timestamp with time zone,"
        " priority integer, weight integer, labels jsonb, timeout_seconds double precision,"
        " max_attempts integer, critical boolean, correlation_key text, flags text[],"
        " job_key text, job_key_mode text, unique_for interval)"
    ]
    migrate(libpq, "0022", down=True)
    assert functions(libpq) == before
    with psycopg.connect(libpq) as conn:
        conn.execute(MIRROR)
        job_id = conn.execute("SELECT hipq_add_job('echo', priority => 3)").fetchone()
        assert job_id is not None
        row = conn.execute("SELECT priority, flags FROM hipq_jobs WHERE id = %s", job_id)
        assert row.fetchone() == (3, None)
        with pytest.raises(psycopg.errors.UndefinedFunction):
            conn.execute("SELECT hipq_add_job('echo', flags => ARRAY['x'])")


ROW_DEFINITION = """SELECT pg_get_functiondef(oid) FROM pg_proc WHERE proname = 'hipq_job_row'"""


def job_row_definition(libpq: str) -> str:
    with psycopg.connect(libpq) as conn:
        row = conn.execute(ROW_DEFINITION).fetchone()
        assert row is not None
        return str(row[0])


def test_0025_replaces_the_job_row_and_its_downgrade_restores_0023s(libpq: str) -> None:
    """0025 redefines hipq_job_row in place (one function, the same signature); its
    downgrade gives 0023's back, and a job added either way has the same row."""
    migrate(libpq, "0024")
    functions_before, row_before = functions(libpq), job_row_definition(libpq)
    migrate(libpq, "0025")
    assert functions(libpq) == functions_before
    assert job_row_definition(libpq) != row_before
    added = [add_echo(libpq)]
    migrate(libpq, "0024", down=True)
    assert functions(libpq) == functions_before
    assert job_row_definition(libpq) == row_before
    added.append(add_echo(libpq))
    assert added[0] == added[1]


def add_echo(libpq: str) -> tuple[object, ...]:
    """The stored columns of a job added by hipq_add_job with the type's defaults."""
    with psycopg.connect(libpq) as conn:
        if conn.execute("SELECT 1 FROM hipq_job_types").fetchone() is None:
            conn.execute(MIRROR)
        added = conn.execute("""SELECT hipq_add_job('echo', '{"n": 1}')""").fetchone()
        assert added is not None
        row = conn.execute(
            """SELECT queue, type, state, payload, labels, retry, priority, weight,
                 timeout_seconds, critical, correlation_key, job_key, attempt, flags,
                 cancel_requested, run_at = created_at, updated_at = created_at
               FROM hipq_jobs WHERE id = %s""",
            added,
        ).fetchone()
        assert row is not None
        return tuple(row)
