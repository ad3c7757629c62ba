"""A job's labels are bounded in number and size (a job with 300,000 labels made every
dashboard page that shows it megabytes long): 422 naming `labels`, nothing stored."""

from __future__ import annotations

import pytest

from hipq.ingest.job_in import MAX_LABEL_NAME, MAX_LABEL_VALUE, MAX_LABELS
from tests.api.conftest import Api, sqlite_api, sqlite_url

__all__ = ["sqlite_api", "sqlite_url"]  # fixtures

TOO_MANY = {f"l{i}": "x" for i in range(MAX_LABELS + 1)}


@pytest.mark.parametrize(
    "labels",
    [
        TOO_MANY,
        {f"l{i}": "x" for i in range(300_000)},
        {"n" * (MAX_LABEL_NAME + 1): "x"},
        {"region": "v" * (MAX_LABEL_VALUE + 1)},
    ],
)
async def test_too_many_or_too_large_labels_are_refused(
    sqlite_api: Api, labels: dict[str, str]
) -> None:
    for answer in (
        await sqlite_api.client.post("/v1/jobs", json={"type": "ok", "labels": labels}),
        await sqlite_api.client.post(
            "/v1/jobs/batch", json={"jobs": [{"type": "ok", "labels": labels}]}
        ),
    ):
        assert answer.status_code == 422, answer.text[:300]
        assert answer.json()["field"].startswith("labels") or "labels" in answer.json()["field"]
    assert await sqlite_api.count_jobs() == 0


async def test_a_change_of_labels_is_bounded_too(sqlite_api: Api) -> None:
    job = await sqlite_api.post_job(type="ok", labels={"a": "b"})
    answer = await sqlite_api.client.patch(f"/v1/jobs/{job['id']}", json={"labels": TOO_MANY})
    assert answer.status_code == 422, answer.text
    assert (await sqlite_api.job(job["id"]))["labels"] == {"a": "b"}


async def test_labels_at_the_bounds_are_taken(sqlite_api: Api) -> None:
    labels = {f"{i:0{MAX_LABEL_NAME}d}": "v" * MAX_LABEL_VALUE for i in range(MAX_LABELS)}
    job = await sqlite_api.post_job(type="ok", labels=labels)
    assert len(job["labels"]) == MAX_LABELS
