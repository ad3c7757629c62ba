"""The layers of docs/design.md hold: import-linter's contracts in pyproject.toml, run
with the repository's config, and every top-level module of hipq placed in a layer (one
left out would be checked by nothing)."""

from __future__ import annotations

import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import hipq

ROOT = Path(__file__).resolve().parents[2]


def _contracts() -> list[dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["importlinter"]["contracts"]


def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    # --no-cache: the test processes run at once and would share one cache folder.
    result = subprocess.run(
        [str(lint), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout, result.stdout


def test_every_top_level_module_is_in_one_layer() -> None:
    [layers] = [c for c in _contracts() if c["type"] == "layers"]
    placed = [name for layer in layers["layers"] for name in re.split(r"[|:]", layer)]
    placed = [name.strip() for name in placed]
    modules = {m.name for m in pkgutil.iter_modules(hipq.__path__)}
    assert sorted(placed) == sorted(modules)
