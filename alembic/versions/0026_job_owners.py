"""a job's owner: job keys unique within their tenant

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29

A job belongs to the tenant of the restricted token that added it ('' for the
service: unrestricted tokens, the CLI, schedules, transactional enqueue). Its key is
one of that owner's names: the open-key index is unique per (tenant, job_key), and
every look-up of a key a caller names filters on the caller's tenant
(docs/security.md). ``hipq_insert_keyed`` (0023), the keyed add of transactional
enqueue, works for the service: it looks for the service's holder of a key, and its
insert's conflict target is the new index.

The downgrade restores the index of one key across owners: it fails while two owners
hold one key in open jobs.
"""

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

_OPEN_KEY = "job_key IS NOT NULL AND state IN ('scheduled', 'running', 'awaiting')"


def _revision_0023() -> ModuleType:
    """0023's module, whose hipq_insert_keyed this revision scopes (one copy of it)."""
    path = Path(__file__).with_name("0023_transactional_job_keys.py")
    spec = importlib.util.spec_from_file_location("hipq_alembic_0023", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _insert_keyed(scoped: bool) -> str:
    """0023's hipq_insert_keyed, its look-ups and conflict target within the service's
    jobs when ``scoped``."""
    sql = _revision_0023().INSERT_KEYED.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    if scoped:
        sql = sql.replace("WHERE job_key = r.job_key", "WHERE tenant = '' AND job_key = r.job_key")
        sql = sql.replace("ON CONFLICT (job_key)", "ON CONFLICT (tenant, job_key)")
    return sql


def _open_key_index(*columns: str) -> None:
    op.create_index(
        "uq_hipq_jobs_open_job_key",
        "hipq_jobs",
        list(columns),
        unique=True,
        postgresql_where=sa.text(_OPEN_KEY),
        sqlite_where=sa.text(_OPEN_KEY),
    )


def upgrade() -> None:
    op.add_column(
        "hipq_jobs",
        sa.Column("tenant", sa.String(200), nullable=False, server_default=""),
    )
    op.drop_index("uq_hipq_jobs_open_job_key", table_name="hipq_jobs")
    _open_key_index("tenant", "job_key")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(_insert_keyed(scoped=True)))


def downgrade() -> None:
    op.drop_index("uq_hipq_jobs_open_job_key", table_name="hipq_jobs")
    _open_key_index("job_key")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(_insert_keyed(scoped=False)))
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.drop_column("tenant")
