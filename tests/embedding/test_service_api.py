"""hipq inside an application: the Service's own surface (from_config, async with,
add_job, add_jobs, get_job, wait_for_job, list_jobs), on both engines, with its
loops running as under ``hipq serve``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hipq.ingest.job_intake import IntakeError
from hipq.lifecycle import State
from hipq.service import Service, ServiceError
from hipq.store import Conflict, NotFound
from tests.support import make_settings

CONFIG = {
    "migrate_on_start": True,
    "log_level": "warning",
    "queues": {"default": {"batch_interval": "50ms"}, "slow": {"batch_interval": "50ms"}},
    "job_types": {
        "ok": {
            "transport": {"python": {"handler": "tests.handlers:ok"}},
            "queue": "slow",
            "priority": 7,
            "weight": 2,
            "timeout": "5m",
        },
        "fail": {
            "transport": {"python": {"handler": "tests.handlers:fail"}},
            "retry": {"strategy": "none"},
        },
    },
}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "hipq.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    return path


async def test_an_application_adds_a_job_and_waits_for_its_result(
    config_file: Path, database_url: str
) -> None:
    async with Service.from_config(config_file, database_url=database_url) as service:
        job = await service.add_job("ok", {"n": 1})
        # The job type's defaults, as a POST without these fields gets them.
        assert (job.queue, job.priority, job.weight, job.timeout_seconds) == ("slow", 7, 2, 300)
        assert job.state is State.SCHEDULED
        done = await service.wait_for_job(job.id, timeout=30)
        assert done.state is State.COMPLETED
        assert done.result == {"echo": {"n": 1}}
        assert (await service.get_job(job.id)).result == {"echo": {"n": 1}}
    assert not service.started


async def test_a_job_fails_and_is_listed_by_state(config_file: Path, database_url: str) -> None:
    async with Service.from_config(config_file, database_url=database_url) as service:
        job = await service.add_job("fail", queue="default", priority=1, labels={"r": "east"})
        done = await service.wait_for_job(job.id, timeout=30)
        assert done.state is State.FAILED
        assert done.last_error is not None and "failing on attempt 1" in done.last_error
        failed = await service.list_jobs(state=State.FAILED, labels={"r": "east"})
        assert [j.id for j in failed] == [job.id]
        assert await service.list_jobs(state=[State.COMPLETED, State.CANCELLED]) == []


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"type": "nope"}, "type", "unknown job type 'nope' (known: fail, ok)"),
        ({"type": "ok", "queue": "elsewhere"}, "queue", "unknown queue 'elsewhere'"),
        ({"type": "ok", "priority": "high"}, "priority", "Input should be a valid integer"),
        ({"type": "ok", "timeout": "soon"}, "timeout", ""),
        ({"type": "ok", "run_in": "1m", "run_at": "2026-01-01T00:00:00Z"}, "run_in", "not both"),
        ({"type": "ok", "windows": [{"start": "05:00"}]}, "windows[0].end", "field required"),
        ({"type": "ok", "weight": 0}, "weight", "greater than or equal to 1"),
    ],
)
async def test_a_refused_job_names_its_field_and_writes_nothing(
    config_file: Path, database_url: str, kwargs: dict[str, object], field: str, message: str
) -> None:
    if "run_at" in kwargs:
        from datetime import datetime

        kwargs = {**kwargs, "run_at": datetime.fromisoformat(str(kwargs["run_at"]))}
    async with Service.from_config(config_file, database_url=database_url) as service:
        with pytest.raises(IntakeError) as refused:
            await service.add_job(**kwargs)  # type: ignore[arg-type]
        assert refused.value.field == field
        assert message in refused.value.message
        assert await service.list_jobs() == []


async def test_a_batch_is_all_or_none_and_a_refusal_names_the_job(
    config_file: Path, database_url: str
) -> None:
    async with Service.from_config(config_file, database_url=database_url) as service:
        with pytest.raises(IntakeError) as refused:
            await service.add_jobs([{"type": "ok"}, {"type": "ok", "payload": [1]}])
        assert refused.value.field == "jobs[1].payload"
        with pytest.raises(IntakeError) as unknown:
            await service.add_jobs([{"type": "ok", "prio": 1}])
        assert (unknown.value.field, unknown.value.message) == ("jobs[0].prio", "unknown field")
        assert await service.list_jobs() == []
        jobs = await service.add_jobs([{"type": "ok", "payload": {"i": i}} for i in range(3)])
        assert [j.payload for j in jobs] == [{"i": 0}, {"i": 1}, {"i": 2}]
        for job in jobs:
            assert (await service.wait_for_job(job.id, 30)).state is State.COMPLETED


async def test_add_job_takes_every_field_a_post_takes(config_file: Path, database_url: str) -> None:
    async with Service.from_config(config_file, database_url=database_url) as service:
        first = await service.add_job("ok", job_key="first", run_in="1h")
        then = await service.add_job("ok", after=[first.id, "first"], after_failed="run")
        assert (then.after, then.after_failed) == ([first.id], "run")
        assert then.waiting_for == 1
        with pytest.raises(IntakeError) as unknown:
            await service.add_job("ok", prio=1)
        assert (unknown.value.field, unknown.value.message) == ("prio", "unknown field")


async def test_a_held_job_key_and_a_missing_job_are_the_store_s_errors(
    config_file: Path, database_url: str
) -> None:
    async with Service.from_config(config_file, database_url=database_url) as service:
        await service.add_job("ok", job_key="k", run_in="1h")
        again = await service.add_job("ok", {"v": 2}, job_key="k", run_in="1h")
        assert again.payload == {"v": 2}  # replace, the default mode
        await service.add_job("ok", correlation_key="c1", run_in="1h")
        with pytest.raises(Conflict):
            await service.add_job("ok", correlation_key="c1", run_in="1h")
        with pytest.raises(NotFound):
            await service.get_job(10**9)


async def test_from_settings_and_use_before_start(database_url: str) -> None:
    service = Service.from_config(make_settings(database_url), run_loops=False)
    with pytest.raises(ServiceError, match="not started"):
        await service.add_job("ok")
    await service.store.close()
    with pytest.raises(TypeError, match="not Settings"):
        Service.from_config(make_settings(database_url), database_url="sqlite+aiosqlite://")


def test_a_bad_config_is_one_line(tmp_path: Path) -> None:
    from hipq.config import ConfigError

    path = tmp_path / "hipq.yaml"
    path.write_text("queues: [1, 2]\n")
    with pytest.raises(ConfigError, match="config error"):
        Service.from_config(path, database_url=f"sqlite+aiosqlite:///{tmp_path}/x.db")
