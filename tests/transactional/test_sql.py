"""The SQL functions called as SQL (PostgreSQL): named arguments, and from a trigger, as
docs/howto-transactional-enqueue.md shows them."""

from __future__ import annotations

import asyncpg
import pytest

from hipq.lifecycle import State
from hipq.service import Service
from tests.transactional.apps import urls
from tests.transactional.conftest import started

pytestmark = pytest.mark.postgres

TRIGGER = """
CREATE OR REPLACE FUNCTION app_order_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM hipq_add_job('receipt', jsonb_build_object('order', NEW.id),
                       labels => '{"region": "east"}');
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS app_order_created ON app_orders;
CREATE TRIGGER app_order_created AFTER INSERT ON app_orders
  FOR EACH ROW EXECUTE FUNCTION app_order_created();
"""


async def test_named_arguments_and_a_trigger(postgres_url_fresh: str) -> None:
    svc: Service = await started(postgres_url_fresh)
    conn = await asyncpg.connect(urls(postgres_url_fresh)["libpq"])
    try:
        job_id = await conn.fetchval(
            "SELECT hipq_add_job('receipt', '{\"order\": 1}', labels => '{\"region\": \"e\"}',"
            " run_at => now() + interval '2 days', max_attempts => 2,"
            " flags => ARRAY['slow', 'eu'])"
        )
        job = await svc.store.job_get(job_id)
        assert (job.correlation_key, job.retry["max_attempts"]) == ("receipt-1:e", 2)
        assert job.flags == ["eu", "slow"]
        assert (job.run_at - job.created_at).days == 2
        await conn.execute(TRIGGER)
        async with conn.transaction():
            await conn.execute("INSERT INTO app_orders (id) VALUES (5), (6)")
        keys = await conn.fetch(
            "SELECT correlation_key, state FROM hipq_jobs WHERE id <> $1 ORDER BY id", job_id
        )
        assert [tuple(r) for r in keys] == [
            ("receipt-5:east", State.SCHEDULED.value),
            ("receipt-6:east", State.SCHEDULED.value),
        ]
        # A job the trigger's function refuses undoes the insert that fired it: order 5's
        # receipt is still open, so a new order 5 cannot have another one.
        await conn.execute("DELETE FROM app_orders WHERE id = 5")
        with pytest.raises(asyncpg.PostgresError, match="correlation_key is already used"):
            await conn.execute("INSERT INTO app_orders (id) VALUES (7), (5)")
        assert await conn.fetchval("SELECT count(*) FROM app_orders WHERE id = 7") == 0
    finally:
        await conn.execute("DROP TRIGGER IF EXISTS app_order_created ON app_orders")
        await conn.close()
        await svc.stop()
