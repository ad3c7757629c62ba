#!/usr/bin/env python3
"""Write hipq/client/sync.py (``Client``) from hipq/client/aio.py (``AsyncClient``).

The two clients are the same calls of hipq.client.calls, one awaited and one not, so
only the asyncio one is written by hand; this script writes the other by the token
substitutions below (as httpcore's scripts/unasync.py does), then sorts its imports
and formats it with ruff. ``--check`` writes nothing and fails when sync.py is not
what aio.py gives (tests/client/test_unasync.py runs it).
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "hipq" / "client" / "aio.py"
TARGET = ROOT / "hipq" / "client" / "sync.py"

DOCSTRING = '''"""``hipq.client.Client``: the REST API from ordinary (blocking) code.

Generated from aio.py by scripts/unasync.py: edit aio.py, then run
``python scripts/unasync.py`` (tests/client/test_unasync.py fails while this file is stale).
"""'''

# (pattern, replacement), applied in order to aio.py's text after its docstring.
SUBS: list[tuple[str, str]] = [
    (r"^import asyncio\n", ""),
    (r"  # noqa: ASYNC\d+", ""),  # asyncio-only lint rules
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\basyncio\.sleep\b", "time.sleep"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncBaseTransport\b", "BaseTransport"),
    (r"\bAsyncClient\b", "Client"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\bfor asyncio code\b", "for blocking code"),
    # An async generator cannot ``yield from``; a generator can.
    (r"^( *)for (\w+) in (.+):\n *yield \2$", r"\1yield from \3"),
]


def unasync(text: str) -> str:
    """sync.py's text from aio.py's ``text``, before ruff."""
    match = re.match(r'"""(.*?)"""', text, re.DOTALL)
    if match is None:
        raise SystemExit(f"{SOURCE}: no module docstring to replace")
    body = text[match.end() :]
    for pattern, replacement in SUBS:
        body = re.sub(pattern, replacement, body, flags=re.MULTILINE)
    if re.search(r"\b(async|await|asyncio)\b", body):
        raise SystemExit(f"{SOURCE}: an asyncio word the substitutions do not cover")
    # Once awaited, now plain: (self.send(call)).content -> self.send(call).content.
    body = re.sub(r"(?<![\w)\]])\((self\.send\((?:[^()]|\([^()]*\))*\))\)", r"\1", body)
    return DOCSTRING + body


def ruff(text: str) -> str:
    """``text`` with its imports sorted and formatted, as ruff leaves every module."""
    for command in (["check", "--select", "I", "--fix", "--quiet"], ["format", "--quiet"]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--stdin-filename", str(TARGET), "-"],
            input=text,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if done.returncode != 0:
            raise SystemExit(f"ruff {command[0]} failed on the generated text:\n{done.stderr}")
        text = done.stdout
    return text


def main(argv: list[str]) -> int:
    wanted = ruff(unasync(SOURCE.read_text()))
    if "--check" in argv:
        current = TARGET.read_text()
        if current == wanted:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            wanted.splitlines(keepends=True),
            str(TARGET.relative_to(ROOT)),
            "generated from aio.py",
        )
        sys.stdout.writelines(diff)
        print(f"\n{TARGET.relative_to(ROOT)} is stale: run python scripts/unasync.py")
        return 1
    TARGET.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
