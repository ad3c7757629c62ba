"""Every shell snippet in the docs runs as pasted against `hipq serve` with the example
config, so none can drift from the code.

The rule: a fenced block marked ``sh``, ``bash``, ``console`` or unmarked whose
commands start with ``curl``, ``hipq`` or ``.venv/bin/hipq`` (after an optional ``$ ``
prompt) is run, command by command, and each must succeed: curl with ``-f`` (2xx), the
CLI with exit status 0. A block that needs what the example config lacks says so by an
HTML comment on the line right before it: ``<!-- not run: needs a Kafka broker -->``.
Each page's blocks run in order against a server of its own with a fresh database,
so the ids a page shows are the ids a reader gets."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.test_cli import HIPQ, REPO, _env, serving

pytestmark = pytest.mark.e2e

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SHELL_LANGUAGES = {"sh", "bash", "console", ""}
PROMPT = "$ "
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*$")
RUNNABLE = re.compile(r"^(curl|hipq|\.venv/bin/hipq)\s")


@dataclass
class Block:
    page: str
    line: int
    commands: list[str]
    not_run: str | None


def _complete(text: str) -> bool:
    if text.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
    except ValueError:  # an open quote: the command goes on on the next line
        return False
    return True


def commands_of(body: str) -> list[str]:
    """The block's commands; with prompts, only the lines after ``$ `` (the rest is output)."""
    prompted = any(line.startswith(PROMPT) for line in body.splitlines())
    commands: list[str] = []
    current: list[str] | None = None
    for line in body.splitlines():
        if current is not None:
            current.append(line)
        elif prompted and line.startswith(PROMPT):
            current = [line[len(PROMPT) :]]
        elif not prompted and line.strip() and not line.lstrip().startswith("#"):
            current = [line]
        else:
            continue
        if _complete("\n".join(current)):
            commands.append("\n".join(current))
            current = None
    return commands


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        language, body = match.group(1), match.group(2)
        if language not in SHELL_LANGUAGES:
            continue
        commands = commands_of(body)
        if not commands or not all(RUNNABLE.match(c) for c in commands):
            continue
        before = text[: match.start()].rstrip().splitlines()
        marker = NOT_RUN.search(before[-1]) if before else None
        found.append(
            Block(
                page=str(page.relative_to(REPO)),
                line=text[: match.start()].count("\n") + 1,
                commands=commands,
                not_run=marker.group(1) if marker else None,
            )
        )
    return found


def _as_run(command: str, port: int) -> str:
    command = command.replace("localhost:8000", f"127.0.0.1:{port}")
    command = re.sub(r"^curl ", "curl -sS -f ", command)
    return re.sub(r"^(\.venv/bin/)?hipq ", f"{shlex.quote(HIPQ)} ", command)


def test_the_rule_finds_the_snippets() -> None:
    """A test that cannot fail is a defect: the rule must find blocks, run and marked."""
    blocks = [block for page in PAGES for block in blocks_of(page)]
    assert sum(1 for b in blocks if b.not_run is None) >= 10
    assert all(b.not_run for b in blocks if b.not_run is not None)
    assert commands_of("$ curl -s x \\\n    -d '{\n}'\n{\"out\": 1}\n") == [
        "curl -s x \\\n    -d '{\n}'"
    ]


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if any(b.not_run is None for b in blocks_of(p))],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_the_page_s_snippets_run_as_pasted(page: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.example.yaml"
    shutil.copy(REPO / "config.example.yaml", config)
    env = {
        "HIPQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}",
        "HIPQ_LOG_LEVEL": "warning",
        "HIPQ_SHUTDOWN_GRACE": "1s",  # the tutorial leaves jobs sleeping: stop at once
    }
    with serving(config, tmp_path / "serve.log", env) as server:
        shell_env = {**_env(), "HIPQ_URL": server.url}
        for block in blocks_of(page):
            if block.not_run is not None:
                continue
            for command in block.commands:
                done = subprocess.run(
                    ["bash", "-o", "pipefail", "-c", _as_run(command, server.port)],
                    cwd=tmp_path,
                    env=shell_env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert done.returncode == 0, (
                    f"{block.page}:{block.line}: {command}\n"
                    f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
                )
