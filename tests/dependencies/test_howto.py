"""The worked examples of docs/dependencies.md and docs/batches.md, run as they are
written against a fresh `hipq serve`: each prints what its page says it prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.client.conftest import run_worked_example

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("page", ["dependencies.md", "batches.md"])
def test_the_worked_example_prints_what_the_page_says(page: str, tmp_path: Path) -> None:
    got, expected = run_worked_example(page, tmp_path)
    for line, pattern in zip(got, expected, strict=True):
        # "*" in the page stands for what differs per run (ids); nothing else is a pattern.
        assert re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), line), (line, pattern)
