"""Every test here may build the ``adaptive`` throttler through its entry point."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.long_waits.entry_point import adaptive_registered


@pytest.fixture(autouse=True)
def _adaptive_entry_point() -> Iterator[None]:
    with adaptive_registered():
        yield
