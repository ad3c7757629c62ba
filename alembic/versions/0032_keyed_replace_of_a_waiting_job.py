"""The SQL functions' keyed replace of a job that waits for others replaces its waits;
flags refuse DEL and the C1 controls

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-29

A ``job_key`` replace of a job that waits for other jobs (``after``) replaces what it
waits for, as the store's keyed replace does (``hipq.store.jobs``): a job added in an
application's transaction waits for nothing, so its open dependency rows go, its count
is zero, its ``after`` is cleared and its ``run_at`` is the new job's (with
``preserve_run_at``: its own, kept in ``after_run_at`` while it waited). Before, the
function wrote the new ``run_at`` over a waiting job and left its waits counted.

A flag name refuses DEL and the C1 controls too (U+0085 is a line break to many
readers), as the API's ``FlagName`` does.

The downgrade restores 0026's ``hipq_insert_keyed`` and 0023's ``hipq_flags``.
"""

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa

from alembic import op

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

_DECLARE = "  action text;\n"
_REPLACE = "    ELSIF action <> 'insert' THEN\n      UPDATE hipq_jobs SET "
_RUN_AT = (
    "run_at = CASE WHEN action = 'replace_keep_run_at' THEN hipq_jobs.run_at ELSE r.run_at END,"
)
_WAITS_RUN_AT = (
    "run_at = CASE WHEN action <> 'replace_keep_run_at' THEN r.run_at"
    " WHEN waits THEN coalesce(hipq_jobs.after_run_at, r.updated_at) ELSE hipq_jobs.run_at END,"
    "\n          waiting_for = CASE WHEN waits THEN 0 ELSE hipq_jobs.waiting_for END,"
    "\n          after = CASE WHEN waits THEN NULL ELSE hipq_jobs.after END,"
    "\n          after_failed = CASE WHEN waits THEN NULL ELSE hipq_jobs.after_failed END,"
)
_DROP_WAITS = (
    "    ELSIF action <> 'insert' THEN\n"
    "      -- What a waiting job waits for is replaced too: this job waits for nothing.\n"
    "      waits := coalesce(holder.waiting_for, 0) > 0;\n"
    "      IF waits THEN\n"
    "        DELETE FROM hipq_job_dependencies WHERE job_id = holder.id AND outcome IS NULL;\n"
    "      END IF;\n"
    "      UPDATE hipq_jobs SET "
)
_C0 = r"(flag #>> '{}') ~ '[\x01-\x1f]'"
_C0_C1 = r"(flag #>> '{}') ~ '[\x01-\x1f\x7f-\x9f]'"


def _revision(name: str) -> ModuleType:
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"hipq_alembic_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _functions(now: bool) -> list[str]:
    """hipq_insert_keyed and hipq_flags as this revision makes them (``now``), or as
    0026 and 0023 made them."""
    keyed = str(_revision("0026_job_owners.py")._functions(now=True)[1])
    flags = str(_revision("0023_transactional_job_keys.py").FLAGS).replace(
        "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1
    )
    if not now:
        return [keyed, flags]
    for part in (_DECLARE, _REPLACE, _RUN_AT):
        assert keyed.count(part) == 1, f"hipq_insert_keyed changed: {part!r}"
    assert flags.count(_C0) == 1, "hipq_flags changed"
    keyed = (
        keyed.replace(_DECLARE, _DECLARE + "  waits boolean;\n")
        .replace(_REPLACE, _DROP_WAITS)
        .replace(_RUN_AT, _WAITS_RUN_AT)
    )
    return [keyed, flags.replace(_C0, _C0_C1)]


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for sql in _functions(now=True):
            op.execute(sa.text(sql))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for sql in _functions(now=False):
            op.execute(sa.text(sql))
