"""`hipq schedules ...` against a real `hipq serve`: what an operator types and reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO, Servers, write_config

pytestmark = pytest.mark.e2e
HIPQ = str(Path(sys.executable).with_name("hipq"))


def _hipq(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [HIPQ, "schedules", *args, "--url", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_add_list_next_pause_run_change_delete(servers: Servers, tmp_path: Path) -> None:
    config = write_config(tmp_path / "hipq.yaml", f"sqlite+aiosqlite:///{tmp_path}/hipq.db")
    url = servers.start("cli", config).url
    added = _hipq(
        url, "add", "nightly", "0 2 * * *", "--type", "record", "--timezone", "Europe/Berlin",
        "--payload", '{"day": "{fire.date}"}', "--overlap", "skip",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["overlap"] == "skip"
    listed = _hipq(url, "list")
    assert (
        listed.returncode == 0 and "nightly" in listed.stdout and "Europe/Berlin" in listed.stdout
    )
    nxt = _hipq(url, "next", "nightly", "-n", "3")
    assert nxt.returncode == 0 and len(nxt.stdout.splitlines()) == 3
    assert all(line.endswith(("T00:00:00Z", "T01:00:00Z")) for line in nxt.stdout.splitlines())
    assert json.loads(_hipq(url, "pause", "nightly").stdout)["paused"] is True
    run = _hipq(url, "run", "nightly")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["job"]["labels"]["schedule"] == "nightly"
    changed = _hipq(
        url, "change", "nightly", "--cron", "30 3 * * *", "--overlap", "buffer_one",
        "--pause-on-failure",
    )  # fmt: skip
    assert changed.returncode == 0 and json.loads(changed.stdout)["cron"] == "30 3 * * *"
    assert json.loads(changed.stdout)["overlap"] == "buffer_one"
    assert json.loads(changed.stdout)["pause_on_failure"] is True
    assert _hipq(url, "delete", "nightly").returncode == 0
    assert "nightly" not in _hipq(url, "list").stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["add", "x", "0 0 30 2 *", "--type", "record"], "cron: '0 0 30 2 *' never fires"),
        (["add", "x", "0 2 * * *", "--type", "nope"], "job.type: unknown job type"),
        (["add", "x", "0 2 * * *", "--type", "record", "--timezone", "Nowhere/X"], "timezone"),
        (["add", "x", "0 2 * * *", "--type", "record", "--overlap", "queue"], "overlap"),
        (["show", "missing"], "schedule 'missing' does not exist"),
        (["change", "missing"], "nothing to change"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    servers: Servers, tmp_path: Path, args: list[str], words: str
) -> None:
    config = write_config(tmp_path / "hipq.yaml", f"sqlite+aiosqlite:///{tmp_path}/hipq.db")
    url = servers.start("cli", config).url
    done = _hipq(url, *args)
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert words in done.stderr
