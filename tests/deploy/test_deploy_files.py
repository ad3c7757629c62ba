"""The files a deployment starts from (the image's config, docker-compose.yml, the pinned
constraints), checked as far as this machine can without a Docker engine: with hipq's
own validation, and the image's config served for real."""

from __future__ import annotations

import os
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from hipq.config import load_settings
from hipq.job_types import JobTypes
from hipq.plugins import RetryStrategies
from tests.test_cli import serving, wait_for

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"


def runtime_requirements(name: str, seen: set[str] | None = None) -> set[str]:
    """Every distribution ``name`` needs at run time (no extras), as installed here."""
    seen = set() if seen is None else seen
    for line in metadata.requires(name) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        dep = canonicalize_name(req.name)
        if dep not in seen:
            seen.add(dep)
            runtime_requirements(dep, seen)
    return seen


def test_constraints_pin_every_runtime_dependency() -> None:
    pinned = {
        canonicalize_name(line.split("==")[0])
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    missing = runtime_requirements("hipq") - pinned
    assert not missing, f"constraints.txt pins no version of {sorted(missing)}"


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def hipq_services() -> dict[str, dict[str, Any]]:
    services = compose()["services"]
    return {name: s for name, s in services.items() if s.get("image") == "hipq:local"}


def mounted_config(service: dict[str, Any]) -> Path:
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if target == "/etc/hipq/config.yaml":
            return REPO / source
    raise AssertionError("no config mounted at /etc/hipq/config.yaml")


def compose_settings(service: dict[str, Any]) -> Any:
    """The settings a compose service's hipq reads: its mounted config and environment."""
    env = {k: str(v) for k, v in service["environment"].items() if k.startswith("HIPQ_")}
    env.pop("HIPQ_CONFIG", None)
    env.pop("HIPQ_TOKENS", None)  # checked apart: empty until an operator mints a token
    with pytest.MonkeyPatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("HIPQ_")]:
            patch.delenv(key)
        for key, value in env.items():
            patch.setenv(key, value)
        return load_settings(mounted_config(service))


def test_compose_services_depend_on_services_it_defines() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for needed in service.get("depends_on", {}):
            assert needed in services, f"{name} depends on {needed}, which compose lacks"


def test_compose_parses_without_a_token_and_hipq_says_how_to_mint_one() -> None:
    text = COMPOSE.read_text()
    # ${VAR:?...} makes compose refuse the whole file before anything could mint a token.
    assert not re.search(r"\$\{HIPQ_TOKENS:\?", text)
    assert "docker compose run --rm --no-deps migrate hipq tokens new" in text


@pytest.mark.parametrize("name", sorted(hipq_services()))
def test_compose_waits_for_the_drain_before_it_kills(name: str) -> None:
    service = hipq_services()[name]
    if service.get("command") != ["hipq", "serve"]:
        pytest.skip(f"{name} does not serve")
    grace = compose_settings(service).shutdown_grace
    period = str(service.get("stop_grace_period", "10s"))  # compose's default is 10 s
    seconds = float(period.removesuffix("s"))
    assert seconds > grace, f"{name}: stop_grace_period {period} <= shutdown_grace {grace:g}s"


@pytest.mark.parametrize("name", sorted(hipq_services()))
def test_compose_config_is_valid_and_uses_the_broker_compose_starts(name: str) -> None:
    service = hipq_services()[name]
    settings = compose_settings(service)
    assert settings.database_url.startswith("postgresql+asyncpg://hipq:hipq@postgres:5432/")
    assert settings.kafka.enabled and settings.kafka.bootstrap_servers == "kafka:9092"
    types = JobTypes.compile(settings, RetryStrategies())
    kafka_types = [t for t, c in settings.job_types.items() if c.transport.kafka is not None]
    assert kafka_types and settings.kafka.responses, "the Kafka broker compose starts is unused"
    assert set(types) >= set(kafka_types)


def test_the_image_config_takes_a_job_as_shipped(tmp_path: Path) -> None:
    shipped = yaml.safe_load((REPO / "deploy/container-config.yaml").read_text())
    assert shipped["job_types"], "a plain `docker run` would take no job"
    # As in the image, but on this machine: a file here, and loopback without tokens.
    shipped["database_url"] = f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}"
    shipped["server"]["host"] = "127.0.0.1"
    # The image's environment migrates at start (HIPQ_MIGRATE_ON_START in the Dockerfile).
    assert "HIPQ_MIGRATE_ON_START=true" in (REPO / "Dockerfile").read_text()
    shipped["migrate_on_start"] = True
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(shipped))
    with serving(config, tmp_path / "serve.log") as server:
        for job_type in shipped["job_types"]:
            payload = {"seconds": 0} if job_type == "sleep" else {"hello": "image"}
            added = httpx.post(
                f"{server.url}/v1/jobs", json={"type": job_type, "payload": payload}, timeout=30
            )
            assert added.status_code == 201, added.text
            job_id = added.json()["id"]

            def done(job_id: int = job_id) -> bool:
                body = httpx.get(f"{server.url}/v1/jobs/{job_id}", timeout=30).json()
                return body["state"] == "completed"

            wait_for(done, 60, f"{job_type} job completed")
