"""Finished jobs are deleted after their ``job_retention``, as an operator sees it
through the API; the setting is off unless configured."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hipq.config import ConfigError, load_settings
from tests.api.conftest import open_api
from tests.api.test_queues_api import metric


async def test_finished_jobs_are_deleted_after_their_retention(database_url: str) -> None:
    retention = {"completed": "1h", "cancelled": "1d"}
    async with open_api(database_url, job_retention=retention) as api:
        done = [(await api.post_job(type="ok"))["id"] for _ in range(2)]
        failed = (await api.post_job(type="permanent"))["id"]
        later = (await api.post_job(type="ok", run_at="2099-01-01T00:00:00Z"))["id"]
        await api.tick()
        assert [(await api.job(i))["state"] for i in [*done, failed]] == [
            "completed",
            "completed",
            "failed",
        ]
        api.clock.advance(1800)
        await api.service.upkeep.run_once()
        assert (await api.job(done[0]))["state"] == "completed"  # not an hour old yet

        api.clock.advance(3600)
        await api.service.upkeep.run_once()
        for job_id in done:
            gone = await api.client.get(f"/v1/jobs/{job_id}")
            assert gone.status_code == 404, gone.text
        # Failed jobs have no retention here: kept for an operator to look at or retry.
        assert (await api.job(failed))["attempts"][0]["outcome"] == "failed"
        assert (await api.job(later))["state"] == "scheduled"
        scraped = (await api.client.get("/metrics")).text
        assert metric(scraped, "hipq_jobs_pruned_total", state="completed") == 2
        assert metric(scraped, "hipq_jobs_pruned_total", state="failed") == 0


async def test_without_retention_nothing_is_deleted(database_url: str) -> None:
    async with open_api(database_url) as api:
        job_id = (await api.post_job(type="ok"))["id"]
        await api.tick()
        api.clock.advance(400 * 86400)
        await api.service.upkeep.run_once()
        assert (await api.job(job_id))["state"] == "completed"


@pytest.mark.parametrize(
    ("retention", "message"),
    [
        ({"completed": "-1h"}, "job_retention.completed: invalid duration '-1h'"),
        ({"completed": 0}, "job_retention.completed: Input should be greater than 0"),
        ({"completd": "1h"}, "job_retention.completd: Extra inputs are not permitted"),
        ({"failed": "soon"}, "job_retention.failed: "),
    ],
)
def test_a_bad_retention_is_refused_naming_the_key(retention: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(None, job_retention=retention)
    assert str(refused.value).startswith(f"config error: {message}")


def test_the_example_config_loads_and_names_every_top_level_key() -> None:
    """config.example.yaml documents every key: it must load, and list each section."""
    example = Path(__file__).resolve().parents[2] / "config.example.yaml"
    settings = load_settings(example)
    assert settings.job_retention.completed is None
    written = set(yaml.safe_load(example.read_text()))
    assert written == set(type(settings).model_fields)
