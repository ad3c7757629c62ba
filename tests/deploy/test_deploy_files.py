"""The files a deployment starts from (the image's config, docker-compose.yml, the pinned
constraints), checked as far as this machine can without a Docker engine: with hipq's
own validation, and the image's config served for real."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from sqlalchemy.engine import make_url

from hipq.config import load_settings
from hipq.job_types import JobTypes
from hipq.plugins import RetryStrategies
from tests.peers import free_port
from tests.test_cli import HIPQ, hipq, serving, wait_for

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


# What an operator's .env holds (docker-compose.yml's header says how to make it).
OPERATOR_ENV = {"HIPQ_DB_PASSWORD": "pw-from-env", "HIPQ_ALLOWED_HOSTS": '["hipq.example.com"]'}


def interpolated(node: Any, env: dict[str, str]) -> Any:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} in the parsed file's strings,
    from ``env``."""
    if isinstance(node, dict):
        return {key: interpolated(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolated(value, env) for value in node]
    if not isinstance(node, str):
        return node

    def value(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2), match.group(3) or ""
        if env.get(name):
            return env[name]
        if op == ":?":
            raise AssertionError(f"compose refuses without {name}: {rest}")
        return rest if op == ":-" else ""

    return re.sub(r"\$\{([A-Z_]+)(?:(:[-?])([^}]*))?\}", value, node)


def compose(env: dict[str, str] = OPERATOR_ENV) -> dict[str, Any]:
    return interpolated(yaml.safe_load(COMPOSE.read_text()), env)


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
    # The password from the environment compose passes on, none in the YAML files.
    assert settings.database_url.startswith("postgresql+asyncpg://hipq:pw-from-env@postgres:5432/")
    assert settings.server.allowed_hosts == ["hipq.example.com"]
    assert settings.kafka.enabled and settings.kafka.bootstrap_servers == "kafka:9092"
    types = JobTypes.compile(settings, RetryStrategies())
    kafka_types = [t for t, c in settings.job_types.items() if c.transport.kafka is not None]
    assert kafka_types and settings.kafka.responses, "the Kafka broker compose starts is unused"
    assert set(types) >= set(kafka_types)


def test_no_password_is_written_in_the_compose_files() -> None:
    with pytest.raises(AssertionError, match="compose refuses without HIPQ_DB_PASSWORD"):
        compose({})
    services = compose()["services"]
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "pw-from-env"
    for name in hipq_services():
        url = yaml.safe_load(mounted_config(hipq_services()[name]).read_text())["database_url"]
        assert make_url(url).password is None, f"{name}'s config holds a database password"


def test_compose_services_restart_rotate_logs_have_limits_and_publish_on_loopback() -> None:
    for name, service in compose()["services"].items():
        if name == "migrate":  # a one-shot job
            continue
        assert service.get("restart") == "unless-stopped", name
        assert service["logging"]["options"]["max-size"], name
        limits = service["deploy"]["resources"]["limits"]
        assert limits["memory"] and limits["cpus"], name
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_kafka_keeps_its_messages_and_the_servers_wait_until_it_is_healthy() -> None:
    services = compose()["services"]
    kafka = services["kafka"]
    data = kafka["environment"]["KAFKA_LOG_DIRS"]
    assert any(v.endswith(f":{data}") for v in kafka["volumes"]), "Kafka's data on no volume"
    assert kafka["healthcheck"]["test"]
    for name, service in hipq_services().items():
        if service.get("command") == ["hipq", "serve"]:
            assert service["depends_on"]["kafka"] == {"condition": "service_healthy"}, name


def test_prometheus_scrapes_every_server_with_a_read_token() -> None:
    services = compose()["services"]
    prometheus = services["prometheus"]
    mounted = dict(reversed(v.split(":")[:2]) for v in prometheus["volumes"])
    config = yaml.safe_load((REPO / mounted["/etc/prometheus/prometheus.yml"]).read_text())
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    [secret] = prometheus["secrets"]
    assert job["authorization"]["credentials_file"] == f"/run/secrets/{secret}"
    targets = {t for group in job["static_configs"] for t in group["targets"]}
    servers = {n for n, s in hipq_services().items() if s.get("command") == ["hipq", "serve"]}
    assert targets == {f"{name}:8000" for name in servers}
    for name in servers:  # the Host Prometheus sends is one hipq accepts (no 421)
        assert compose_settings(hipq_services()[name]).server.public_url == f"http://{name}:8000"


def image_environment(tmp_path: Path) -> dict[str, str]:
    """The HIPQ_ variables the image sets (the Dockerfile's ENV), as an operator's
    container would have them, with the database on a file here instead of the volume
    and the config file from this checkout."""
    dockerfile = (REPO / "Dockerfile").read_text()
    env = dict(re.findall(r"\b(HIPQ_[A-Z_]+)=(\S+)", dockerfile))
    assert env["HIPQ_SERVER__HOST"] == "0.0.0.0"
    assert env["HIPQ_CONFIG"] == "/etc/hipq/config.yaml"
    assert "COPY deploy/container-config.yaml /etc/hipq/config.yaml" in dockerfile
    env["HIPQ_CONFIG"] = str(IMAGE_CONFIG)
    env["HIPQ_DATABASE_URL"] = f"sqlite+aiosqlite:///{tmp_path / 'hipq.db'}"
    return env


IMAGE_CONFIG = REPO / "deploy/container-config.yaml"


def test_the_image_without_a_token_stops_saying_how_to_mint_one(tmp_path: Path) -> None:
    env = {**os.environ, **image_environment(tmp_path)}
    env.pop("HIPQ_TOKENS", None)
    port = str(free_port())
    done = subprocess.run(
        [HIPQ, "serve", "--port", port], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: refusing to listen on 0.0.0.0 without tokens"), done.stderr
    assert "hipq tokens new" in last and "HIPQ_TOKENS" in last


def test_the_image_with_a_minted_token_takes_jobs_and_says_it_is_healthy(
    tmp_path: Path,
) -> None:
    """As docs/production.md says: mint a token with the image, start it with the line
    in HIPQ_TOKENS; its config (on 0.0.0.0) takes a job of each type."""
    minted = hipq("tokens", "new", "--name", "ops", "--scope", "admin")
    assert minted.code == 0, minted.err
    token = minted.out.split("token: ")[1].split()[0]
    line = minted.out.split("auth.tokens_file): ")[1].strip()
    env = {**image_environment(tmp_path), "HIPQ_TOKENS": line}
    shipped = yaml.safe_load(IMAGE_CONFIG.read_text())
    assert shipped["server"]["host"] == "0.0.0.0" and shipped["job_types"]
    with serving(IMAGE_CONFIG, tmp_path / "serve.log", env=env) as server:
        auth = {"authorization": f"Bearer {token}"}
        for job_type in shipped["job_types"]:
            payload = {"seconds": 0} if job_type == "sleep" else {"hello": "image"}
            added = httpx.post(
                f"{server.url}/v1/jobs",
                json={"type": job_type, "payload": payload},
                headers=auth,
                timeout=30,
            )
            assert added.status_code == 201, added.text
            job_id = added.json()["id"]

            def done(job_id: int = job_id) -> bool:
                got = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers=auth, timeout=30)
                return got.json()["state"] == "completed"

            wait_for(done, 60, f"{job_type} job completed")
        # The image's HEALTHCHECK, as Docker runs it in the container.
        check = healthcheck({"HIPQ_SERVER__PORT": str(server.port)})
        assert (check.returncode, check.stdout.strip()) == (0, "ready"), check.stderr
    gone = healthcheck({"HIPQ_SERVER__PORT": str(server.port)})
    assert gone.returncode == 1
    assert gone.stderr.startswith(f"not ready: http://127.0.0.1:{server.port}/readyz")
    assert len(gone.stderr.strip().splitlines()) == 1


def healthcheck(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "COPY deploy/healthcheck.py /opt/hipq/healthcheck.py" in dockerfile
    assert 'CMD ["python", "-I", "-S", "/opt/hipq/healthcheck.py"]' in dockerfile
    return subprocess.run(
        [sys.executable, "-I", "-S", str(REPO / "deploy/healthcheck.py")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
