"""docs/job-keys.md's worked example, run as it is written against a fresh
`hipq serve`: it prints what the page says it prints."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.conftest import serving_the_example_config
from tests.test_cli import REPO, _env

pytestmark = pytest.mark.e2e


def _block(kind: str) -> str:
    text = (REPO / "docs" / "job-keys.md").read_text()
    return text.split(f"```{kind}\n")[1].split("```", 1)[0]


def test_the_worked_example_prints_what_the_page_says(tmp_path: Path) -> None:
    with serving_the_example_config(tmp_path) as server:
        ran = subprocess.run(
            [sys.executable, "-c", _block("python")],
            capture_output=True,
            text=True,
            env={**_env(), "HIPQ_URL": server.url},
            timeout=120,
        )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == _block("text").splitlines()
