"""hipq_job_row: a correlation key beginning with ``hipq-pull:`` is refused

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-29

A pull job's correlation key is hipq's own, a new random one per claim
(``hipq-pull:`` and 32 characters), and only its worker's report settles it. A job
given a key with that prefix is refused by the intake in Python (``correlation_key``);
``hipq_add_job`` and ``hipq_add_jobs`` refuse it the same way, first among the key's
checks, as the one intake does. The downgrade restores 0026's function.
"""

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa

from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

_EMPTY = "    IF v_key = '' THEN\n"
_REFUSED = """    IF starts_with(v_key, 'hipq-pull:') THEN
      PERFORM hipq_refuse(p || 'correlation_key',
        'keys beginning with ''hipq-pull:'' are hipq''s own');
    ELSIF v_key = '' THEN
"""


def _row(now: bool) -> str:
    """hipq_job_row as this revision makes it (``now``), or as 0026 made it."""
    path = Path(__file__).with_name("0026_job_owners.py")
    spec = importlib.util.spec_from_file_location("hipq_alembic_0026", path)
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    row = str(module._functions(now=True)[0])
    assert row.count(_EMPTY) == 1, "hipq_job_row's key checks moved"
    return row.replace(_EMPTY, _REFUSED) if now else row


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(_row(now=True)))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(_row(now=False)))
