"""``hipq flags``: forbid job flags on a queue at run time, and allow them again
(through the API; the setting is stored with the queue, for every process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from hipq.commands import options
from hipq.commands.options import ConfigOpt, UrlOpt, command_group

flags_app = command_group(
    help="Forbidden flags of a queue: jobs carrying one wait, with that reason.",
    no_args_is_help=True,
)

Flags = Annotated[list[str], typer.Argument(help="one or more flags")]


def _show(queue: str, flags: list[str]) -> None:
    typer.echo(f"{queue}: forbidden flags: {', '.join(flags) or '(none)'}")


def _change(
    url: str | None, config: str | None, queue: str, change: Callable[[set[str]], set[str]]
) -> None:

    with options.api(url, config) as client:
        now = set(client.get_queue(queue).forbidden_flags)
        _show(queue, client.set_forbidden_flags(queue, sorted(change(now))).forbidden_flags)


@flags_app.command("show")
def flags_show(queue: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """The queue's forbidden flags."""

    with options.api(url, config) as client:
        _show(queue, client.get_queue(queue).forbidden_flags)


@flags_app.command("forbid")
def flags_forbid(queue: str, flags: Flags, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Forbid flags on the queue (added to those already forbidden)."""
    _change(url, config, queue, lambda now: now | set(flags))


@flags_app.command("allow")
def flags_allow(queue: str, flags: Flags, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Allow flags again on the queue."""
    _change(url, config, queue, lambda now: now - set(flags))


@flags_app.command("clear")
def flags_clear(queue: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Allow every flag on the queue."""
    _change(url, config, queue, lambda _now: set())
