"""The running service: activities start in order and stop in reverse."""

from __future__ import annotations

import pytest

from hipq.activity import Activity
from hipq.service import Service, build_service
from tests.support import FakeClock, make_settings


class Recorder:
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail

    async def start(self) -> None:
        if self.fail:
            raise RuntimeError(f"{self.name} cannot start")
        self.log.append(f"start {self.name}")

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")

    async def run_once(self) -> None:
        return None


def service(database_url: str) -> Service:
    settings = make_settings(database_url, queues={"default": {}, "other": {}})
    return build_service(settings, clock=FakeClock(), run_loops=False)


async def test_activities_start_in_order_and_stop_in_reverse(database_url: str) -> None:
    svc = service(database_url)
    log: list[str] = []
    svc.activities = [Recorder(n, log) for n in ("a", "b", "c")]
    await svc.start()
    assert svc.started
    await svc.stop()
    await svc.store.close()
    assert log == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]
    assert not svc.started


async def test_a_failed_start_stops_what_started_in_reverse(database_url: str) -> None:
    svc = service(database_url)
    log: list[str] = []
    svc.activities = [
        Recorder("a", log),
        Recorder("b", log),
        Recorder("c", log, fail=True),
        Recorder("d", log),
    ]
    with pytest.raises(RuntimeError, match="c cannot start"):
        await svc.start()
    await svc.store.close()
    assert log == ["start a", "start b", "stop b", "stop a"]
    assert not svc.started


async def test_the_process_guard_starts_first_and_the_loops_last(database_url: str) -> None:
    svc = service(database_url)
    assert all(isinstance(a, Activity) for a in svc.activities)
    names = [a.name for a in svc.activities]
    assert names[0] == svc.guard.name
    assert names[1] == "store"
    assert names[-2:] == ["loop-default", "loop-other"]
    await svc.start()
    try:
        assert svc.status()["queues_owned"] == []
    finally:
        await svc.stop()
