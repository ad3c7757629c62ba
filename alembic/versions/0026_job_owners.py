"""a job's owner: job keys unique within their tenant; a job type's labels and
notification targets for transactional enqueue

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

The job types' mirror gains their ``labels`` and ``notify``, and the SQL functions
apply them as ``hipq.ingest.job_intake.Intake.resolve`` does: a job starts with its
type's labels (its own values win; a ``share`` by one of them then counts it) and
notifies its type's targets. The functions of 0023/0025 are made again from their
own text here, with ``notify`` among the columns a new row and a replacement write.

The downgrade restores the index of one key across owners: it fails while two owners
hold one key in open jobs.
"""

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

_OPEN_KEY = "job_key IS NOT NULL AND state IN ('scheduled', 'running', 'awaiting')"


def _revision(name: str) -> ModuleType:
    """An earlier revision's module, whose functions this one remakes (one copy of each)."""
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"hipq_alembic_{name[:4]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _functions(now: bool) -> list[str]:
    """The functions as this revision makes them (``now``), or as 0023/0025 made them:
    hipq_job_row, and the three that insert its row."""
    m23 = _revision("0023_transactional_job_keys.py")
    row = _revision("0025_job_row_common_path.py").ROW
    texts = [m23.INSERT_KEYED, m23.INSERT, m23.ADD_JOB]
    if now:
        row = row.replace(
            "r.labels := coalesce(a_labels, '{}');",
            "r.labels := jt.labels || coalesce(a_labels, '{}');  -- the job's own values win",
        ).replace(
            "r.cancel_requested := false;", "r.cancel_requested := false;\n  r.notify := jt.notify;"
        )
        texts = [
            t.replace(", flags)", ", flags, notify)")
            .replace(", r.flags)", ", r.flags, r.notify)")
            .replace("flags = r.flags,", "flags = r.flags, notify = r.notify,")
            .replace("WHERE job_key = r.job_key", "WHERE tenant = '' AND job_key = r.job_key")
            .replace("ON CONFLICT (job_key)", "ON CONFLICT (tenant, job_key)")
            for t in texts
        ]
    return [t.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1) for t in [row, *texts]]


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
    op.add_column(
        "hipq_job_types",
        sa.Column(
            "labels",
            sa.JSON().with_variant(JSONB(), "postgresql"),
            nullable=False,
            server_default=sa.text("'{}'"),
        ),
    )
    op.add_column(
        "hipq_job_types",
        sa.Column("notify", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True),
    )
    if op.get_bind().dialect.name == "postgresql":
        for sql in _functions(now=True):
            op.execute(sa.text(sql))


def downgrade() -> None:
    op.drop_index("uq_hipq_jobs_open_job_key", table_name="hipq_jobs")
    _open_key_index("job_key")
    if op.get_bind().dialect.name == "postgresql":
        for sql in _functions(now=False):
            op.execute(sa.text(sql))
    with op.batch_alter_table("hipq_job_types") as batch:
        batch.drop_column("notify")
        batch.drop_column("labels")
    with op.batch_alter_table("hipq_jobs") as batch:
        batch.drop_column("tenant")
