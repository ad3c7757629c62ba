"""hipq/client/sync.py is what scripts/unasync.py writes from aio.py: the blocking
client is never edited by hand, so it cannot drift from the asyncio one."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "unasync.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sync_py_is_generated_from_aio_py() -> None:
    checked = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=REPO
    )
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr


def test_a_change_to_aio_py_shows_in_the_generated_text() -> None:
    unasync = _script()
    source = unasync.SOURCE.read_text()
    edited = source.replace("return await self._model(calls.get_job(job_id), Job)", "return None")
    assert edited != source
    assert unasync.ruff(unasync.unasync(edited)) != unasync.TARGET.read_text()


def test_the_substitutions_leave_no_asyncio_behind() -> None:
    unasync = _script()
    text = unasync.unasync(
        '"""doc"""\nimport asyncio\n\nasync def f(c: AsyncClient) -> AsyncIterator[int]:\n'
        "    await asyncio.sleep(1)\n    async with c:\n        for x in (await c.send(1)).xs:\n"
        "            yield x\n"
    )
    assert "async" not in text.split('"""', 2)[2] and "await" not in text
    assert "def f(c: Client) -> Iterator[int]:" in text
    assert "time.sleep(1)" in text and "    with c:" in text
