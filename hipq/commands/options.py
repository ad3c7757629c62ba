"""What every ``hipq`` command shares: the --url and --config options, the API client
they build, and one way to fail (one line on stderr, exit status 1)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Annotated, Any, NoReturn

import typer
from pydantic import BaseModel

from hipq.client import ApiError, Backoff, Client, HipqError
from hipq.client.calls import TOKEN_ENV
from hipq.config import ConfigError, Settings, load_settings

ConfigOpt = Annotated[
    str | None,
    typer.Option("--config", "-c", envvar="HIPQ_CONFIG", metavar="FILE", help="YAML config file"),
]
UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="HIPQ_URL",
        metavar="URL",
        help="hipq's API (default: from the config's server)",
    ),
]


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


def settings_or_fail(config: str | None) -> Settings:
    try:
        return load_settings(config)
    except ConfigError as exc:
        fail(str(exc))


LabelOpt = Annotated[list[str] | None, typer.Option(metavar="NAME:VALUE", help="repeatable")]


# A CLI call rides out a server that is starting (503 with Retry-After) or restarting,
# but does not keep an operator waiting long for one that is down.
CLI_BACKOFF = Backoff(budget=5.0)


def base_url(url: str | None, config: str | None) -> str:
    """--url, else the host and port of the config ``hipq serve`` reads (--config or
    HIPQ_CONFIG, then HIPQ_SERVER__* variables): the same server, on any port."""
    if url:
        return url.rstrip("/")
    server = settings_or_fail(config).server
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(server.host, server.host)
    return f"http://{f'[{host}]' if ':' in host else host}:{server.port}"


@contextlib.contextmanager
def api(url: str | None, config: str | None) -> Iterator[Client]:
    """The client of the API that --url or the config names (the token from HIPQ_TOKEN);
    an error it raises ends the command with one line."""
    base = base_url(url, config)
    try:
        with Client(base, backoff=CLI_BACKOFF) as client:
            yield client
    except ApiError as exc:
        fail(exc.message + _hint(exc.status))
    except HipqError as exc:
        fail(str(exc))


def parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text, parse_constant=lambda c: fail(f"{what}: {c} is not JSON"))
    except json.JSONDecodeError as exc:
        fail(f"{what} is not valid JSON: {exc}")


def label_map(items: list[str] | None, option: str = "--label") -> dict[str, str]:
    """``name:value`` items, the spelling the API's ``label=`` filter uses too. The
    former ``name=value`` is still read, with a line that names the new spelling."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition(":")
        if "=" in name:  # name=value (a label name holds no "=": it cannot be name:value)
            name, sep, value = item.partition("=")
            typer.echo(
                f"warning: {option} {item!r}: name=value is deprecated, write {name}:{value}",
                err=True,
            )
        if not sep or not name:
            fail(f"{option} {item!r} must look like name:value")
        out[name] = value
    return out


def print_body(body: Any) -> None:
    if isinstance(body, BaseModel):
        body = body.model_dump(mode="json")
    typer.echo(json.dumps(body, indent=2, sort_keys=False))


def _hint(status: int) -> str:
    """What an operator can do about an answer that says who they are not."""
    if status == 401:
        return f" (set {TOKEN_ENV} to a token: `hipq tokens new` makes one)"
    if status == 403:
        return f" (the token in {TOKEN_ENV} lacks the scope or tenant this needs)"
    return ""
