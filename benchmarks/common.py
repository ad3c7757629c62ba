"""What the benchmark scripts share: running hipq's measurements from a source checkout.

The measurements live in ``hipq.commands.bench`` (so that an installed ``hipq bench`` has them
too); the scripts here only put this checkout first on the path and call into it.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def use_checkout() -> None:
    """Import hipq from this checkout, even where another hipq is installed."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


def run_cli(command: str, argv: list[str], prog: str) -> None:
    """Run ``hipq <command> <argv>``; exits with its status."""
    use_checkout()
    from hipq.commands.main import app

    app(args=[command, *argv], prog_name=prog)
