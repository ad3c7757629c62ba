"""The README's "Try it" block, pasted as it is into a shell in a copy of the repo: it
waits for the server, then every command works. The copy's .venv stands for a finished
install (links to this interpreter and its `hipq`, and scripts/serve's stamp), so the
test installs nothing; scripts/wait-ready's wait for an install runs on its own."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_cli import REPO, _env, free_port, wait_for

pytestmark = pytest.mark.e2e


def try_it_block() -> str:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Try it", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def checkout_copy(root: Path, installed: bool = True) -> Path:
    """What the block uses of a checkout: scripts, the example config, pyproject.toml."""
    copy = root / "hipq"
    copy.mkdir()
    shutil.copytree(REPO / "scripts", copy / "scripts")
    for name in ("config.example.yaml", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, copy / name)
    (copy / ".venv" / "bin").mkdir(parents=True)
    (copy / ".venv" / "bin" / "python").symlink_to(sys.executable)
    if installed:
        mark_installed(copy)
    return copy


def mark_installed(copy: Path) -> None:
    (copy / ".venv" / "bin" / "hipq").symlink_to(Path(sys.executable).with_name("hipq"))
    digest = hashlib.sha256((copy / "pyproject.toml").read_bytes()).hexdigest()
    (copy / ".venv" / ".hipq-installed").write_text(digest + "\n")


@pytest.fixture
def shells() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Shells started in sessions of their own; each one's whole group (the servers it
    left in the background too) is stopped afterwards."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for shell in started:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(shell.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(1)


def run_shell(
    shells: list[subprocess.Popen[bytes]],
    script: str,
    cwd: Path,
    env: dict[str, str],
    name: str = "",
) -> subprocess.Popen[bytes]:
    # Output to files: a pipe would stay open as long as the server in the background.
    with open(cwd / f"{name}out.txt", "wb") as out, open(cwd / f"{name}err.txt", "wb") as err:
        shell = subprocess.Popen(
            ["bash", "-c", script],
            cwd=cwd,
            env={**_env(), **env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    shells.append(shell)
    return shell


def test_the_try_it_block_works_pasted_as_it_is(
    tmp_path: Path, shells: list[subprocess.Popen[bytes]]
) -> None:
    copy = checkout_copy(tmp_path)
    block = try_it_block()
    assert "./scripts/serve &" in block and "./scripts/wait-ready" in block
    # Another port than 8000: the block itself names none, the config does.
    shell = run_shell(shells, block, copy, {"HIPQ_SERVER__PORT": str(free_port())})
    assert shell.wait(timeout=180) == 0, (copy / "err.txt").read_text()
    out = (copy / "out.txt").read_text()
    assert out.count('"hello": "world"') >= 2  # the job added, then waited for
    assert '"state": "completed"' in out
    assert '"region": "east"' in out
    assert "ready" in out.splitlines()
    listing = out[out.index("ID  ") :]
    assert " completed " in listing and " echo " in listing
    assert "QUEUE" in out and "default" in out


def test_wait_ready_waits_for_the_first_install_then_the_server(
    tmp_path: Path, shells: list[subprocess.Popen[bytes]]
) -> None:
    copy = checkout_copy(tmp_path, installed=False)
    port = str(free_port())
    waiting = run_shell(
        shells,
        "./scripts/wait-ready",
        copy,
        {"HIPQ_SERVER__PORT": port, "HIPQ_WAIT_SECONDS": "120"},
    )
    wait_for(
        lambda: "waiting for scripts/serve to install" in (copy / "err.txt").read_text(),
        60,
        "the install wait announced",
    )
    assert waiting.poll() is None
    mark_installed(copy)  # as scripts/serve does at the end of its install
    run_shell(shells, "exec ./scripts/serve", copy, {"HIPQ_SERVER__PORT": port}, "serve-")
    assert waiting.wait(timeout=120) == 0, (copy / "err.txt").read_text()
    assert (copy / "out.txt").read_text().strip() == "ready"


def test_wait_ready_gives_up_with_one_line(
    tmp_path: Path, shells: list[subprocess.Popen[bytes]]
) -> None:
    copy = checkout_copy(tmp_path)
    waiting = run_shell(
        shells,
        "./scripts/wait-ready",
        copy,
        {"HIPQ_SERVER__PORT": str(free_port()), "HIPQ_WAIT_SECONDS": "3"},
    )
    assert waiting.wait(timeout=60) == 1
    lines = (copy / "err.txt").read_text().strip().splitlines()
    assert lines[0].startswith("waiting for hipq at http://127.0.0.1:")
    assert (
        lines[-1].startswith("error: hipq at http://127.0.0.1:") and "not ready after" in lines[-1]
    )
    assert len(lines) == 2
