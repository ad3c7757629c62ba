"""hipq's public names: each one listed for type checkers is the object its module
defines, and ``import hipq`` loads none of the service."""

from __future__ import annotations

import importlib
import subprocess
import sys

import hipq
from hipq.throttling import Stage, ThrottlerBase


def test_every_public_name_is_listed_once_and_resolves() -> None:
    assert hipq.__all__ == sorted(hipq.__all__)
    assert set(hipq.__all__) == {*hipq._EXPORTS, "__version__"}
    for name, module in hipq._EXPORTS.items():
        assert getattr(hipq, name) is getattr(importlib.import_module(module), name)


def test_import_hipq_loads_nothing_of_the_service() -> None:
    heavy = ("fastapi", "sqlalchemy", "pydantic", "httpx", "starlette", "hipq.jobs")
    code = f"import sys, hipq; print([m for m in sys.modules if m.startswith({heavy!r})])"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert loaded.stdout.strip() == "[]", loaded.stderr


class _Quota(ThrottlerBase):
    label = "region"
    lookback_seconds = 60.0

    def __init__(self) -> None:
        self.quotas = {"east": 2, object(): 1}
        self.limit = 5

    def decide(self, candidates: object, view: object, now: object) -> hipq.Verdict:
        return hipq.Verdict()


class _Bare:
    limit = True  # not a number of starts

    def decide(self, candidates: object, view: object, now: object) -> hipq.Verdict:
        return hipq.Verdict()


def test_a_stage_reads_the_optional_members_once() -> None:
    stage = Stage.of("q", _Quota())
    assert stage.quotas is not None and stage.quotas["east"] == 2
    assert stage.limit == 5
    assert stage.on_feedback is None and stage.state is None
    bare = Stage.of("b", _Bare())
    assert bare.quotas is None and bare.limit is None
