"""What every ``hipq`` command shares: the --url and --config options, the API client
they build, and one way to fail (one line on stderr, exit status 1).

Light on purpose: every command module imports it, and ``hipq --help`` imports every
command module. The client (httpx, the response models) and the config (pydantic
settings) cost a CLI call most of its CPU, so they are imported by the call that uses
them (tests/test_cli.py holds the line).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from hipq.client import Client
    from hipq.config import Settings


def command_group(**settings: Any) -> typer.Typer:
    """A typer app of the ``hipq`` command. Help is click's plain text: typer's rich
    help imports rich and markdown-it, which cost ``hipq --help`` more CPU than the rest
    of the command; and errors are one line (``main``), never a rich traceback panel."""
    return typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, **settings)


def name_the_values(command: Any) -> None:
    """Give every option and argument of ``command`` (a click command or group, and
    its subcommands) that names no metavar one from its name: ``--queue QUEUE``,
    ``--limit N``, where typer would show ``<str>`` or ``<list[str]>``."""
    for param in getattr(command, "params", []):
        if param.param_type_name == "argument":
            # An argument's help shows its name, then typer's type: keep the name only.
            param.display_type_rich = lambda ctx: None
        if param.metavar is not None:
            continue
        kind = param.bare_type() if hasattr(param, "bare_type") else ""
        descriptor = getattr(param, "type_descriptor", None)
        if getattr(param, "is_flag", False) or kind == "bool":
            continue
        if descriptor is not None and descriptor.is_choice:
            continue  # its choices are the better placeholder
        param.metavar = "N" if kind in ("int", "list[int]") else param.name.upper()
    for sub in getattr(command, "commands", {}).values():
        name_the_values(sub)


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


def settings_or_fail(config: str | None, *, opens_database: bool = True) -> Settings:
    from hipq.config import ConfigError, load_settings

    try:
        return load_settings(config, opens_database=opens_database)
    except ConfigError as exc:
        fail(str(exc))


LabelOpt = Annotated[list[str] | None, typer.Option(metavar="NAME:VALUE", help="repeatable")]


# A CLI call rides out a server that is starting (503 with Retry-After) or restarting,
# but does not keep an operator waiting long for one that is down.
CLI_BACKOFF_SECONDS = 5.0


def base_url(url: str | None, config: str | None) -> str:
    """--url, else the host and port of the config ``hipq serve`` reads (--config or
    HIPQ_CONFIG, then HIPQ_SERVER__* variables): the same server, on any port."""
    if url:
        return url.rstrip("/")
    server = settings_or_fail(config, opens_database=False).server
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(server.host, server.host)
    return f"http://{f'[{host}]' if ':' in host else host}:{server.port}"


@contextlib.contextmanager
def api(url: str | None, config: str | None) -> Iterator[Client]:
    """The client of the API that --url or the config names (the token from HIPQ_TOKEN);
    an error it raises ends the command with one line."""
    from hipq.client.errors import ApiError, HipqError
    from hipq.client.sync import Backoff, Client

    base = base_url(url, config)
    try:
        with Client(base, backoff=Backoff(budget=CLI_BACKOFF_SECONDS)) as client:
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
    if hasattr(body, "model_dump"):  # a response model (pydantic is not imported here)
        body = body.model_dump(mode="json")
    typer.echo(json.dumps(body, indent=2, sort_keys=False))


def _hint(status: int) -> str:
    """What an operator can do about an answer that says who they are not."""
    from hipq.client.calls import TOKEN_ENV

    if status == 401:
        return f" (set {TOKEN_ENV} to a token: `hipq tokens new` makes one)"
    if status == 403:
        return f" (the token in {TOKEN_ENV} lacks the scope or tenant this needs)"
    return ""
