"""docs/schedules.md's worked example (overlap buffer_one with catch-up), run as it is
written: it prints what the page says it prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _example() -> tuple[str, str]:
    text = (REPO / "docs" / "schedules.md").read_text()
    section = text[text.index("### Worked example: a report") :]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    printed = section.split("```text\n", 1)[1].split("```", 1)[0]
    return code, printed


def test_the_overlap_example_prints_what_the_page_says(tmp_path: Path) -> None:
    code, printed = _example()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    ran = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == printed.splitlines()
