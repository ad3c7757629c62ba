"""The CLI on top of the client: the server it finds without --url (the config's port),
the one spelling of a label (name:value), and `hipq jobs wait`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.client.conftest import Server
from tests.test_cli import REPO, Result, _env, free_port

pytestmark = pytest.mark.e2e

HIPQ = str(Path(sys.executable).with_name("hipq"))


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """SQLite only: what these tests check does not depend on the engine."""
    return f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('cli') / 'hipq.db'}"


def hipq(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> Result:
    done = subprocess.run(
        [HIPQ, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**_env(), **(env or {})},
        cwd=cwd,
        timeout=120,
    )
    return Result(tuple(args), done.returncode, done.stdout, done.stderr)


def test_without_url_the_cli_talks_to_the_port_the_config_names(
    server: Server, tmp_path: Path
) -> None:
    config = tmp_path / "hipq.yaml"
    config.write_text(yaml.safe_dump({"server": {"port": server.port}}))
    by_env = hipq("queues", "default", env={"HIPQ_SERVER__PORT": str(server.port)})
    assert by_env.json()["name"] == "default"
    by_option = hipq("queues", "default", "--config", str(config))
    assert by_option.json()["name"] == "default"
    by_config_env = hipq("queues", "default", env={"HIPQ_CONFIG": str(config)})
    assert by_config_env.json()["name"] == "default"
    # The variable overrides the file, as for `hipq serve`.
    elsewhere = hipq(
        "queues", env={"HIPQ_CONFIG": str(config), "HIPQ_SERVER__PORT": str(_closed_port(server))}
    )
    assert "cannot reach hipq at http://127.0.0.1:" in elsewhere.one_error_line()


def _closed_port(server: Server) -> int:
    port = free_port()
    assert port != server.port
    return port


def test_labels_are_name_colon_value_and_the_old_spelling_says_so(server: Server) -> None:
    url = ["--url", server.url]
    added = hipq("jobs", "add", "ok", "--label", "region:east", "--label", "link:http://x/y", *url)
    job = added.json()
    assert job["labels"] == {"region": "east", "link": "http://x/y"}
    assert added.err == ""

    listed = hipq("jobs", "list", "--label", "link:http://x/y", "--json", *url).json()
    assert [j["id"] for j in listed["jobs"]] == [job["id"]]

    old = hipq("jobs", "list", "--label", "region=east", "--json", *url)
    assert job["id"] in [j["id"] for j in old.json()["jobs"]]
    assert old.err.strip() == (
        "warning: --label 'region=east': name=value is deprecated, write region:east"
    )

    wrong = hipq("jobs", "add", "ok", "--label", "region", *url)
    assert wrong.one_error_line() == "error: --label 'region' must look like name:value"


def test_jobs_wait_prints_the_finished_job_or_says_it_is_still_open(server: Server) -> None:
    url = ["--url", server.url]
    job = hipq("jobs", "add", "ok", "--payload", '{"w": 1}', *url).json()
    done = hipq("jobs", "wait", str(job["id"]), "--timeout", "30", *url).json()
    assert done["state"] == "completed" and done["result"] == {"echo": {"w": 1}}

    hanging = hipq("jobs", "add", "hang", *url).json()
    waited = hipq("jobs", "wait", str(hanging["id"]), "--timeout", "1", *url)
    line = waited.one_error_line()
    assert line.startswith(f"error: job {hanging['id']} is still ") and line.endswith("after 1s")
    assert hipq("jobs", "cancel", str(hanging["id"]), *url).code == 0


def test_a_token_that_cannot_be_one_is_one_line(server: Server) -> None:
    result = hipq("queues", "--url", server.url, env={"HIPQ_TOKEN": "tökén"})
    assert "HIPQ_TOKEN holds characters no token has" in result.one_error_line()
