"""docs/howto-client.md's worked example, run as it is written against a fresh
`hipq serve`: it prints what the how-to says it prints."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from tests.client.conftest import run_worked_example

pytestmark = pytest.mark.e2e


def test_the_worked_example_prints_what_the_howto_says(tmp_path: Path) -> None:
    got, expected = run_worked_example("howto-client.md", tmp_path)
    for line, pattern in zip(got, expected, strict=True):
        # "..." in the how-to stands for the rest of a long message.
        assert fnmatch.fnmatchcase(line, pattern.replace("...", "*")), (line, pattern)
