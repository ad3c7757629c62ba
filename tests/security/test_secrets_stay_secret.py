"""An end-to-end run of `hipq serve` with secrets in its config and environment: none
of them appears in any response or in any line the process logs.

The secrets: a webhook secret and an outbound header value from the environment, a
password and a token in a job type's URL; a job's payload and an external system's
response body must stay out of the log (they may hold secrets of their own).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hipq.security.signatures import signature_headers
from tests.e2e.conftest import HIPQ, REPO, free_port
from tests.peers import serve_app
from tests.support import eventually

WEBHOOK_SECRET = "whsec_V2ViaG9va1NlY3JldFRoYXRNdXN0TmV2ZXJMZWFr"
HEADER_SECRET = "hdr-SECRET-7f3a9c"
URL_PASSWORD = "urlPASSWORD9d2e"
QUERY_TOKEN = "queryTOKEN41bb"
PAYLOAD_SECRET = "payloadSECRET0c1d"
BODY_SECRET = "bodySECRETe55a"
CONFIGURED = [WEBHOOK_SECRET, WEBHOOK_SECRET.removeprefix("whsec_"), HEADER_SECRET, URL_PASSWORD]
CONFIGURED += [QUERY_TOKEN]
NEVER_LOGGED = [*CONFIGURED, PAYLOAD_SECRET, BODY_SECRET]


class External:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.app = Starlette(
            routes=[
                Route("/sync", self.sync, methods=["POST"]),
                Route("/fail", self.fail, methods=["POST"]),
                Route("/hold", self.hold, methods=["POST"]),
            ]
        )

    async def sync(self, request: Request) -> JSONResponse:
        self.headers.append(dict(request.headers))
        return JSONResponse({"status": "ok", "echo": BODY_SECRET})

    async def fail(self, request: Request) -> JSONResponse:
        return JSONResponse({"error": BODY_SECRET}, 500)

    async def hold(self, request: Request) -> JSONResponse:
        return JSONResponse({"accepted": True}, 202)


def _config(path: Path, database_url: str, ext_port: int) -> Path:
    secret_url = f"http://user:{URL_PASSWORD}@127.0.0.1:{ext_port}"
    http = {"callback": False, "timeout": "5s"}
    config: dict[str, Any] = {
        "database_url": database_url,
        "migrate_on_start": True,
        "queues": {"default": {"batch_interval": "100ms"}},
        "job_types": {
            "sync_call": {
                "retry": {"strategy": "none"},
                "transport": {"http": {**http, "url": f"{secret_url}/sync?token={QUERY_TOKEN}"}},
            },
            "failing": {
                "retry": {"strategy": "none"},
                "transport": {"http": {**http, "url": f"{secret_url}/fail?token={QUERY_TOKEN}"}},
            },
            "unreachable": {
                "retry": {"strategy": "none"},
                "transport": {
                    "http": {
                        **http,
                        "url": f"http://u:{URL_PASSWORD}@127.0.0.1:1/x?t={QUERY_TOKEN}",
                    }
                },
            },
            "signed": {
                "correlation_key": "{payload.key}",
                "transport": {"http": {"url": f"http://127.0.0.1:{ext_port}/hold"}},
            },
        },
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIPQ_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    # Secrets come from the environment, as docs/production.md says to keep them.
    env["HIPQ_JOB_TYPES__SYNC_CALL__TRANSPORT__HTTP__HEADERS__APIKEY"] = HEADER_SECRET
    env["HIPQ_JOB_TYPES__SIGNED__CALLBACK_SIGNATURE__SECRET"] = WEBHOOK_SECRET
    return env


def _spawn(config: Path, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [str(HIPQ), "serve", "--config", str(config), "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_env(),
            cwd=config.parent,
        )


@pytest.fixture
async def external() -> AsyncIterator[tuple[External, int]]:
    ext = External()
    port = free_port()
    async with serve_app(ext.app, port):
        yield ext, port


async def test_no_configured_secret_in_any_response_or_log_line(
    database_url: str, tmp_path: Path, external: tuple[External, int]
) -> None:
    ext, ext_port = external
    config = _config(tmp_path / "hipq.yaml", database_url, ext_port)
    log_path = tmp_path / "hipq.log"
    port = free_port()
    process = _spawn(config, port, log_path)
    answers: list[httpx.Response] = []
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as api:

            async def ready() -> bool:
                assert process.poll() is None, log_path.read_text()
                try:
                    return (await api.get("/readyz")).status_code == 200
                except httpx.HTTPError:
                    return False

            await eventually(ready, timeout=60)
            answers += await _traffic(api)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert ext.headers and ext.headers[0]["apikey"] == HEADER_SECRET  # it was configured
    for answer in answers:
        for secret in CONFIGURED:
            assert secret not in answer.text, (answer.request.url, answer.text)
            assert secret not in str(answer.headers), (answer.request.url, answer.headers)
    log = log_path.read_text(errors="replace")
    assert "hipq serving on" in log  # the log is the server's, at its default level
    for secret in NEVER_LOGGED:
        assert secret not in log, (secret, log)


async def _traffic(api: httpx.AsyncClient) -> list[httpx.Response]:
    """Every kind of request a run sees, ordinary and hostile; the answers."""
    out: list[httpx.Response] = []
    payload = {"note": PAYLOAD_SECRET, "key": "k-1"}
    ids = []
    for type in ("sync_call", "failing", "unreachable", "signed"):
        answer = await api.post("/v1/jobs", json={"type": type, "payload": payload})
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["id"])
        out.append(answer)

    async def finished() -> bool:
        states = [(await api.get(f"/v1/jobs/{i}")).json()["state"] for i in ids[:3]]
        return all(s in ("completed", "failed") for s in states)

    await eventually(finished, timeout=60)
    body = b'{"status": "ok"}'
    signed = signature_headers(WEBHOOK_SECRET, "msg-1", int(time.time()), body)
    for headers in (signed, signed, {**signed, "webhook-signature": "v1,Zm9yZ2Vk"}, {}):
        out.append(await api.post("/v1/callbacks/k-1?type=signed", content=body, headers=headers))
    out.append(await api.post("/v1/jobs", json={"type": "no-such-type"}))
    out.append(
        await api.post(
            "/v1/jobs", content=b"{bad json", headers={"content-type": "application/json"}
        )
    )
    for path in ("/metrics", "/readyz", "/healthz", "/v1/responses", "/v1/queues"):
        out.append(await api.get(path))
    for job_id in ids:
        out.append(await api.get(f"/v1/jobs/{job_id}"))
    out.append(await api.get("/v1/jobs"))
    out.append(await api.get("/openapi.json"))
    return out


SHORT_SECRET = "whsec_c2hvcnQ"  # short enough to fit PyYAML's excerpt of a line


@pytest.mark.parametrize(
    "text",
    [
        # An invalid value next to the secret.
        "job_types:\n  signed:\n"
        f"    callback_signature: {{secret: '{SHORT_SECRET}', tolerance: soon}}\n"
        "    transport: {http: {url: 'http://127.0.0.1:9/x'}}\n",
        # YAML that does not parse, on the secret's line.
        f"job_types:\n  signed:\n    callback_signature: {{secret: '{SHORT_SECRET}'\n",
        f"job_types: {{a: {{callback_signature: {{secret: {SHORT_SECRET}: x}}}}}}\n",
        # A URL template refused, with a password and a token in it.
        "job_types:\n  leaky:\n    transport:\n      http:\n"
        f"        url: 'http://u:{URL_PASSWORD}@{{payload.host}}/x?token={QUERY_TOKEN}'\n",
    ],
)
def test_a_config_error_does_not_echo_the_secret_next_to_it(tmp_path: Path, text: str) -> None:
    config = tmp_path / "hipq.yaml"
    config.write_text(text)
    done = subprocess.run(
        [str(HIPQ), "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        env={k: v for k, v in _env().items() if not k.startswith("HIPQ_")},
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert done.stderr.startswith("error: "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for secret in [SHORT_SECRET, SHORT_SECRET.removeprefix("whsec_"), *CONFIGURED]:
        assert secret not in done.stdout + done.stderr, done.stderr
