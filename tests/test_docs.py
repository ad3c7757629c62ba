"""The docs as a reader pastes from them, checked without a server: every link lands
on a file and heading that exist, every YAML block parses, and every job type a
command or SQL call names is one config.example.yaml has (or one the same page
configures). The worked examples themselves run against config.example.yaml in
tests/client/test_howto.py, tests/dependencies/test_howto.py,
tests/verbs/test_job_keys_howto.py and the README's Try-it block in
tests/client/test_try_it.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from hipq.config import load_settings

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", REPO / "examples" / "README.md", *(REPO / "docs").glob("*.md")])
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")

# Where the docs name a job type in something to run: the CLI, SQL, a JSON body.
NAMED_TYPES = [
    re.compile(r"hipq jobs add ([a-z_]+)"),
    re.compile(r"hipq_add_job\('([a-z_]+)'"),
    re.compile(r"--on-complete ([a-z_]+)"),
    re.compile(r"\"type\": ?\"([a-z_]+)\""),
]


RUN_KINDS = {"", "sh", "bash", "shell", "console", "sql", "python"}


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_link_lands_on_a_file_and_a_heading(page: Path) -> None:
    text = FENCE.sub("", page.read_text())
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not this checkout's
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(REPO)}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(REPO)}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_yaml_block_parses(page: Path) -> None:
    for kind, body in FENCE.findall(page.read_text()):
        if kind == "yaml":
            yaml.safe_load(body)  # raises, naming the line, when it does not parse


def configured_here(page: Path) -> set[str]:
    """Job types the page configures itself: in a YAML block's job_types, or in a
    python example's job_types={...}."""
    names: set[str] = set()
    for kind, body in FENCE.findall(page.read_text()):
        if kind == "yaml":
            loaded = yaml.safe_load(body)
            if isinstance(loaded, dict) and isinstance(loaded.get("job_types"), dict):
                names |= set(loaded["job_types"])
        if kind == "python":
            names |= set(re.findall(r"job_types=\{\s*\"([a-z_]+)\"", body))
    return names


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_job_types_the_docs_run_are_in_the_example_config(page: Path) -> None:
    example = set(load_settings(REPO / "config.example.yaml", opens_database=False).job_types)
    text = page.read_text()
    # What a reader runs: shell, SQL and python blocks (not output shown as text).
    runnable = "\n".join(body for kind, body in FENCE.findall(text) if kind in RUN_KINDS)
    inline = "\n".join(re.findall(r"`([^`\n]+)`", FENCE.sub("", text)))
    named = {m for pattern in NAMED_TYPES for m in pattern.findall(runnable + "\n" + inline)}
    missing = named - example - configured_here(page)
    assert not missing, f"{page_id(page)} runs job types config.example.yaml lacks: {missing}"
