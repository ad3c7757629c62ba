"""A job type's defaults that a job's own values override: labels (merged, the job's
value wins per label) and notification targets (replaced), on both engines."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import open_api
from tests.notifications.conftest import Receiver, notify_settings

CHARGE: dict[str, Any] = {
    "queue": "payments",
    "labels": {"kind": "charge", "source": "shop"},
    "transport": {"python": {"handler": "tests.handlers:hang"}},
}
REFUND: dict[str, Any] = {**CHARGE, "labels": {"kind": "refund"}}
PAYMENTS = {
    "concurrency": 10,
    "throttlers": [{"share": {"label": "kind", "shares": {"charge": 40, "refund": 60}}}],
}


async def test_a_job_carries_its_types_labels_under_its_own(database_url: str) -> None:
    async with open_api(
        database_url,
        queues={"default": {}, "bulk": {}, "payments": PAYMENTS},
        job_types={"charge": CHARGE, "refund": REFUND},
    ) as api:
        plain = await api.post_job(type="charge")
        own = await api.post_job(type="charge", labels={"kind": "refund", "region": "east"})
        assert plain["labels"] == {"kind": "charge", "source": "shop"}
        assert own["labels"] == {"kind": "refund", "source": "shop", "region": "east"}
        assert (await api.job(plain["id"]))["labels"] == plain["labels"]
        without = await api.post_job(type="ok")
        assert without["labels"] == {}


async def test_a_share_by_type_needs_no_label_from_the_submitter(database_url: str) -> None:
    async with open_api(
        database_url,
        queues={"default": {}, "bulk": {}, "payments": PAYMENTS},
        job_types={"charge": CHARGE, "refund": REFUND},
    ) as api:
        for _ in range(6):
            await api.post_job(type="charge")
        await api.tick("payments")
        queue = (await api.client.get("/v1/queues/payments")).json()
        assert queue["running"] == 4  # 40 % of 10: the share read the type's label
        assert queue["in_use_by"]["kind"]["charge"] == 4


async def test_a_types_notify_targets_apply_unless_the_job_names_its_own(
    database_url: str,
) -> None:
    receiver = Receiver()
    settings = notify_settings(receiver, targets={"audit": {"webhook": {"url": receiver.url}}})
    async with receiver.up(), open_api(database_url, **settings) as api:
        typed = await api.post_job(type="ok")
        own = await api.post_job(type="ok", notify=["audit"])
        assert typed["notify"] == ["hook"]
        assert own["notify"] == ["audit"]
