"""GET /v1/processes: the live processes, what each runs and its load (both engines;
on SQLite the one process of the file)."""

from __future__ import annotations

from hipq.version import __version__
from tests.api.conftest import Api


async def test_the_process_lists_itself_with_its_queues_and_load(api: Api) -> None:
    await api.service.registry.run_once()
    await api.post_job(type="hang")
    await api.post_job(type="hang")
    await api.tick()
    response = await api.client.get("/v1/processes")
    assert response.status_code == 200, response.text
    [me] = response.json()["processes"]
    assert me["id"] == api.service.owner
    assert me["queues"] == ["bulk", "default"]
    assert "default" in me["owned"]
    assert me["in_flight"] == 2
    assert me["in_flight_by_queue"]["default"] == {"running": 2, "awaiting": 0}
    assert me["heartbeat_at"] >= me["started_at"]
    assert me["version"] == __version__


async def test_a_process_stopped_is_no_longer_listed(api: Api) -> None:
    await api.service.registry.run_once()
    await api.service.store.process_remove(api.service.owner)
    response = await api.client.get("/v1/processes")
    assert response.json()["processes"] == []
