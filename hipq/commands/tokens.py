"""``hipq tokens``: make a fresh API token and the line that configures it."""

from __future__ import annotations

from typing import Annotated

import typer

from hipq.commands.options import command_group
from hipq.security.tokens import (
    ENV_VAR,
    SCOPES,
    TokenConfigError,
    config_line,
    new_token,
    parse_line,
)

tokens_app = command_group(
    help="API tokens (see docs/security.md): print a fresh one.", no_args_is_help=True
)


@tokens_app.command("new")
def tokens_new(
    name: Annotated[str, typer.Option(help="who holds the token (shown in 403s, never secret)")],
    scope: Annotated[
        list[str], typer.Option(help=f"repeat for several: {', '.join(SCOPES)} (default: admin)")
    ] = [],  # noqa: B006 - typer's way of a repeatable option
    queue: Annotated[
        list[str], typer.Option(help="restrict the token to this queue (repeat for several)")
    ] = [],  # noqa: B006
    type: Annotated[
        list[str], typer.Option(help="restrict the token to this job type (repeat for several)")
    ] = [],  # noqa: B006
    limit: Annotated[
        list[str],
        typer.Option(
            help="what its jobs may set, e.g. notify=a,b labels=region:east priority=50..200 "
            "critical=yes (repeat for several; docs/security.md)"
        ),
    ] = [],  # noqa: B006
) -> None:
    """Print a new token (give it to the client, it is shown once) and the line to add
    to HIPQ_TOKENS or to auth.tokens_file (it holds the token's SHA-256, not the token)."""
    token = new_token()
    line = config_line(name, scope or ["admin"], token, queue, type, limit)
    try:
        parse_line(line, "the new token")  # the same rules as at start
    except TokenConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"token: {token}")
    typer.echo(f"config line ({ENV_VAR} or auth.tokens_file): {line}")
