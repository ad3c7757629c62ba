"""A batch's owner in the store's own statements, on both engines: a tenant's jobs join
and seal only its batches, another tenant's answering as one that does not exist,
whatever path the jobs come by (not only the API's check before the insert)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hipq.batches import NewBatch
from hipq.jobs import NewJob
from hipq.store import BadReference, NotFound, Store

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
ABSENT = 987654


def _job(tenant: str, batch_id: int) -> NewJob:
    return NewJob("ok", "default", {}, T0, batch_id=batch_id, tenant=tenant)


async def _refusal(store: Store, job: NewJob) -> str:
    with pytest.raises(BadReference) as refused:
        await store.job_insert_many([job], T0)
    return f"{refused.value.field}: {refused.value}".replace(str(job.batch_id), "<id>")


async def test_a_tenants_jobs_join_only_its_own_batches(store: Store) -> None:
    beta = await store.batch_open(NewBatch(owner="beta"), T0)
    other = await _refusal(store, _job("acme", beta))
    assert other == await _refusal(store, _job("acme", ABSENT))
    assert "does not exist" in other
    (joined,) = (await store.job_insert_many([_job("beta", beta)], T0)).jobs
    (by_service,) = (await store.job_insert_many([_job("", beta)], T0)).jobs
    assert joined.batch_id == by_service.batch_id == beta
    assert (await store.batch_get(beta)).total == 2


async def test_a_tenant_seals_and_reads_only_its_own_batches(store: Store) -> None:
    beta = await store.batch_open(NewBatch(owner="beta"), T0)
    for owner in ("acme",):
        with pytest.raises(NotFound):
            await store.batch_seal_now(beta, T0, owner)
        with pytest.raises(NotFound):
            await store.batch_get(beta, owner)
    assert (await store.batch_get(beta)).status == "open"
    assert (await store.batch_seal_now(beta, T0, "beta")).status == "finished"
