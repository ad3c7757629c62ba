"""A schedule's name is one segment of its routes (/v1/schedules/{name}, the dashboard's
buttons): names that a route cannot carry, or that resolve into another route, are
refused with a 422 naming the field, in the API and in the config."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import update

from hipq.config import ConfigError
from hipq.store.schema import schedules
from tests.api.conftest import Api
from tests.support import make_settings

BAD_NAMES = [
    "../../v1/queues/default",
    "a/b",
    ".",
    "..",
    "a\\b",
    "tab\there",
    "nl\nx",
    "invoice\u202etxt.exe",  # shown as invoiceexe.txt
    "a\u2066b\u2069",
    "zero\u200bwidth",
    "c1\x85",
]
JOB = {"type": "ok"}


@pytest.mark.parametrize("name", BAD_NAMES)
async def test_the_api_refuses_a_name_the_routes_cannot_carry(sqlite_api: Api, name: str) -> None:
    answer = await sqlite_api.client.post(
        "/v1/schedules", json={"name": name, "cron": "0 * * * *", "job": JOB}
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == "name"
    listed = await sqlite_api.client.get("/v1/schedules")
    assert listed.json()["schedules"] == []


async def test_names_with_dots_and_other_characters_inside_are_kept(sqlite_api: Api) -> None:
    for name in ("nightly.report", "a..b", "übersicht 1", "x?y#z%"):
        answer = await sqlite_api.client.post(
            "/v1/schedules", json={"name": name, "cron": "0 * * * *", "job": JOB}
        )
        assert answer.status_code == 201, answer.text
    assert (await sqlite_api.client.get("/v1/schedules/x%3Fy%23z%25")).status_code == 200
    assert (await sqlite_api.client.delete("/v1/schedules/a..b")).status_code == 204


@pytest.mark.parametrize("name", ["../x", "a/b", ".."])
def test_the_config_refuses_such_a_name_in_one_line(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_settings(
            f"sqlite+aiosqlite:///{tmp_path}/hipq.db",
            schedules={name: {"cron": "0 2 * * *", "job": JOB}},
        )
    message = str(caught.value)
    assert "\n" not in message and "schedules." in message and "'/'" in message, message


async def test_a_name_stored_before_they_were_refused_is_shown_with_its_marks_visible(
    sqlite_api: Api,
) -> None:
    made = await sqlite_api.client.post(
        "/v1/schedules", json={"name": "invoice", "cron": "0 * * * *", "job": JOB}
    )
    assert made.status_code == 201, made.text
    async with sqlite_api.service.store.engine.begin() as conn:
        await conn.execute(update(schedules).values(name="invoice\u202etxt.exe"))
    page = (await sqlite_api.client.get("/dashboard/schedules")).text
    assert "<b>invoice\\u202etxt.exe</b>" in page
    assert "\u202e" not in page.replace('data-schedule="invoice\u202etxt.exe"', "")
