"""``hipq flags``: forbid job flags on a queue at run time, and allow them again
(through the API; the setting is stored with the queue, for every process)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

flags_app = typer.Typer(
    help="Forbidden flags of a queue: jobs carrying one wait, with that reason.",
    no_args_is_help=True,
)

UrlOpt = Annotated[
    str | None,
    typer.Option("--url", envvar="HIPQ_URL", help="hipq's API (default: from the config's server)"),
]
ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", envvar="HIPQ_CONFIG", help="YAML config file")
]
Flags = Annotated[list[str], typer.Argument(help="one or more flags")]


def _queue(url: str | None, config: str | None, queue: str) -> tuple[str, dict[str, Any]]:
    from hipq import cli  # the shared client helpers; imported late: cli imports this module

    base = cli._base_url(url, config)
    return base, cli.call("GET", base, f"/v1/queues/{queue}")


def _set(base: str, queue: str, flags: list[str]) -> None:
    from hipq import cli

    out = cli.call("PUT", base, f"/v1/queues/{queue}/forbidden-flags", json={"flags": flags})
    typer.echo(f"{queue}: forbidden flags: {', '.join(out['forbidden_flags']) or '(none)'}")


@flags_app.command("show")
def flags_show(queue: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """The queue's forbidden flags."""
    _base, q = _queue(url, config, queue)
    typer.echo(f"{queue}: forbidden flags: {', '.join(q['forbidden_flags']) or '(none)'}")


@flags_app.command("forbid")
def flags_forbid(queue: str, flags: Flags, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Forbid flags on the queue (added to those already forbidden)."""
    base, q = _queue(url, config, queue)
    _set(base, queue, sorted({*q["forbidden_flags"], *flags}))


@flags_app.command("allow")
def flags_allow(queue: str, flags: Flags, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Allow flags again on the queue."""
    base, q = _queue(url, config, queue)
    _set(base, queue, sorted(set(q["forbidden_flags"]) - set(flags)))


@flags_app.command("clear")
def flags_clear(queue: str, url: UrlOpt = None, config: ConfigOpt = None) -> None:
    """Allow every flag on the queue."""
    base, _q = _queue(url, config, queue)
    _set(base, queue, [])
