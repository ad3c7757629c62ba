"""A schedule makes jobs: creating or changing one needs `submit` besides `operate`;
pausing, resuming and deleting one need `operate` only."""

from __future__ import annotations

from pathlib import Path

from hipq.security.tokens import config_line, new_token
from tests.api.conftest import open_api, sqlite_url  # noqa: F401  # a fixture

SCHEDULE = {"name": "hourly", "cron": "0 * * * *", "job": {"type": "ok"}}


async def test_creating_or_changing_a_schedule_needs_submit_too(
    tmp_path: Path,
    sqlite_url: str,  # noqa: F811
) -> None:
    operate, both = new_token(), new_token()
    file = tmp_path / "tokens"
    file.write_text(
        config_line("ops", ["operate"], operate)
        + "\n"
        + config_line("ops-and-submit", ["operate", "submit"], both)
        + "\n"
    )
    async with open_api(sqlite_url, auth={"tokens_file": str(file)}) as api:
        as_operate = {"Authorization": f"Bearer {operate}"}
        as_both = {"Authorization": f"Bearer {both}"}
        refused = await api.client.post("/v1/schedules", json=SCHEDULE, headers=as_operate)
        assert refused.status_code == 403, refused.text
        assert "'submit'" in refused.json()["message"]
        created = await api.client.post("/v1/schedules", json=SCHEDULE, headers=as_both)
        assert created.status_code == 201, created.text
        change = {"job": {"type": "ok", "payload": {"x": 1}}}
        patched = await api.client.patch("/v1/schedules/hourly", json=change, headers=as_operate)
        assert patched.status_code == 403
        patched = await api.client.patch("/v1/schedules/hourly", json=change, headers=as_both)
        assert patched.status_code == 200, patched.text
        for verb in ("pause", "resume"):
            answer = await api.client.post(f"/v1/schedules/hourly/{verb}", headers=as_operate)
            assert answer.status_code == 200, answer.text
        deleted = await api.client.delete("/v1/schedules/hourly", headers=as_operate)
        assert deleted.status_code == 204
