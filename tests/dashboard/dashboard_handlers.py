"""python handlers for the dashboard's browser tests (they run inside `hipq serve`).

The test steers them through files in the directory named by ``DASHBOARD_FLAGS``:
``flaky`` fails while the file ``fail`` exists; ``hold`` keeps its job running until
the file ``release`` appears.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from hipq.transports.python import JobContext

FLAGS_ENV = "DASHBOARD_FLAGS"
HOLD_LIMIT_SECONDS = 120  # a forgotten release ends the job anyway


def _flag(name: str) -> Path:
    return Path(os.environ[FLAGS_ENV]) / name


async def flaky(job: JobContext) -> dict[str, Any]:
    if _flag("fail").exists():
        raise RuntimeError("upstream refused: the fail flag is set")
    return {"ok": True}


async def hold(job: JobContext) -> dict[str, Any]:
    for _ in range(HOLD_LIMIT_SECONDS * 20):
        if _flag("release").exists():
            return {"released": True}
        await asyncio.sleep(0.05)
    raise RuntimeError("never released")
