"""`hipq serve` with tokens, as an operator runs it: `hipq tokens new`, the CLI's
HIPQ_TOKEN, the refusal to listen beyond loopback without tokens, and a log free of tokens."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.test_cli import HIPQ, REPO, _env, free_port, hipq, serving, write_config

pytestmark = pytest.mark.e2e


def _run(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = _env()
    if token is not None:
        env["HIPQ_TOKEN"] = token
    return subprocess.run(
        [HIPQ, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )


def _new_token(*args: str) -> tuple[str, str]:
    made = _run("tokens", "new", *args)
    assert made.returncode == 0, made.stderr
    first, second = made.stdout.splitlines()
    token = first.removeprefix("token: ")
    line = second.partition(": ")[2]
    assert token.startswith("hipq_") and token not in line
    return token, line


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_serve_refuses_to_listen_beyond_loopback_without_tokens(tmp_path: Path) -> None:
    config = write_config(tmp_path / "hipq.yaml", tmp_path / "hipq.db")
    line = hipq("serve", "--config", str(config), "--host", "0.0.0.0", "--port", str(free_port()))
    assert line.one_error_line() == (
        "error: refusing to listen on 0.0.0.0 without tokens: add one (`hipq tokens new "
        "--name NAME --scope admin`, then HIPQ_TOKENS or auth.tokens_file), or set "
        "auth.behind_gateway: true if an authenticating gateway sits in front"
    )


def test_a_bad_tokens_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "tokens").write_text("ci read,everything hipq_0123456789abcdefghijkl\n")
    config = write_config(
        tmp_path / "hipq.yaml", tmp_path / "hipq.db", auth={"tokens_file": str(tmp_path / "tokens")}
    )
    line = hipq("serve", "--config", str(config), "--port", str(free_port())).one_error_line()
    assert line.startswith(
        f"error: {tmp_path / 'tokens'}:1: token 'ci': unknown scope 'everything'"
    )
    assert "hipq_0123456789abcdefghijkl" not in line


def test_tokens_new_then_the_cli_with_hipq_token(tmp_path: Path) -> None:
    submitter, submit_line = _new_token("--name", "ci", "--scope", "submit")
    operator, operate_line = _new_token("--name", "ops", "--scope", "read", "--scope", "operate")
    (tmp_path / "tokens").write_text(f"{submit_line}\n{operate_line}\n")
    config = write_config(
        tmp_path / "hipq.yaml", tmp_path / "hipq.db", auth={"tokens_file": str(tmp_path / "tokens")}
    )
    with serving(config, tmp_path / "serve.log") as server:
        url = ["--url", server.url]
        added = _run("jobs", "add", "hang", *url, token=submitter)
        assert added.returncode == 0, added.stderr
        job_id = str(eval_json(added.stdout)["id"])
        assert _one_error_line(_run("jobs", "add", "ok", *url)) == (
            "error: a valid bearer token is required (Authorization: Bearer <token>)"
            " (set HIPQ_TOKEN to a token: `hipq tokens new` makes one)"
        )
        assert _one_error_line(_run("jobs", "show", job_id, *url, token=submitter)) == (
            "error: token 'ci' lacks the 'read' scope"
            " (the token in HIPQ_TOKEN lacks the scope or tenant this needs)"
        )
        assert _one_error_line(_run("jobs", "show", job_id, *url, token="hipq_" + "x" * 40)) == (
            "error: the bearer token is not valid"
            " (set HIPQ_TOKEN to a token: `hipq tokens new` makes one)"
        )
        shown = _run("jobs", "show", job_id, *url, token=operator)
        assert shown.returncode == 0 and eval_json(shown.stdout)["id"] == int(job_id)
        assert _run("jobs", "cancel", job_id, *url, token=operator).returncode == 0
        metrics = httpx.get(f"{server.url}/metrics", timeout=30)
        assert metrics.status_code == 401
        log = server.log_text()
    for token in (submitter, operator):
        assert token not in log


def eval_json(text: str) -> dict[str, object]:
    value = json.loads(text)
    assert isinstance(value, dict)
    return value


def test_tokens_new_writes_job_limits_and_refuses_a_bad_one() -> None:
    _token, line = _new_token(
        "--name",
        "acme",
        "--scope",
        "submit",
        "--queue",
        "default",
        "--limit",
        "priority=50..200",
        "--limit",
        "critical=yes",
    )
    assert " queue=default priority=50..200 critical=yes sha256:" in line
    refused = _run("tokens", "new", "--name", "acme", "--limit", "priority=soon")
    assert "priority= takes MIN..MAX" in _one_error_line(refused)
