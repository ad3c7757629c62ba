"""The built-in ``adaptive`` throttler's entry point, for a venv installed before it existed.

hipq finds throttlers only through entry points, and a venv whose hipq was installed
from an older checkout does not list ``adaptive``. ``adaptive_registered`` puts a
distribution on the path that declares it (the same line as pyproject.toml) for the
duration of a block, so that the service loads it the way it loads every plugin.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hipq import plugins

_ENTRY_POINT = "[hipq.throttlers]\nadaptive = throttlers.adaptive:Adaptive\n"


@contextlib.contextmanager
def adaptive_registered() -> Iterator[None]:
    if "adaptive" in plugins.installed(plugins.THROTTLERS):
        yield
        return
    with tempfile.TemporaryDirectory() as root:
        info = Path(root, "hipq_adaptive_entry_point-0.dist-info")
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hipq-adaptive-entry-point\n")
        (info / "entry_points.txt").write_text(_ENTRY_POINT)
        sys.path.append(root)
        plugins.installed.cache_clear()
        try:
            yield
        finally:
            sys.path.remove(root)
            plugins.installed.cache_clear()
