"""The worked examples of docs/dependencies.md and docs/batches.md, run as they are
written against a fresh `hipq serve`: each prints what its page says it prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.conftest import client_config
from tests.test_cli import REPO, _env, serving

pytestmark = pytest.mark.e2e


def _blocks(page: str, kind: str) -> list[str]:
    text = (REPO / "docs" / page).read_text()
    return [part.split("```", 1)[0] for part in text.split(f"```{kind}\n")[1:]]


@pytest.mark.parametrize("page", ["dependencies.md", "batches.md"])
def test_the_worked_example_prints_what_the_page_says(page: str, tmp_path: Path) -> None:
    example, printed = _blocks(page, "python")[0], _blocks(page, "text")[0]
    config = client_config(tmp_path / "hipq.yaml", f"sqlite+aiosqlite:///{tmp_path / 'deps.db'}")
    with serving(config, tmp_path / "serve.log") as server:
        ran = subprocess.run(
            [sys.executable, "-c", example],
            capture_output=True,
            text=True,
            env={**_env(), "HIPQ_URL": server.url},
            timeout=120,
        )
    assert ran.returncode == 0, ran.stderr
    got, expected = ran.stdout.splitlines(), printed.splitlines()
    assert len(got) == len(expected), ran.stdout
    for line, pattern in zip(got, expected, strict=True):
        # "*" in the page stands for what differs per run (ids); nothing else is a pattern.
        assert re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), line), (line, pattern)
